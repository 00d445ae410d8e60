"""Remote Event Relay: the wire, sending and accepting (spec 000 "Remote Event Relay")."""
