"""`config set`'s text edit (gateway/config/edit.py), as an operator reads the file afterwards: a
new last entry of a list or a mapping goes above the blank line and the comment that head the
next section, not below them. Before: `plugin_roots[2]=./third` left `./third` under the blank
line, stuck to `# the API`, and the blank line was gone from above it."""

from __future__ import annotations

from gateway.config.edit import delete_value, set_value

FILE = """\
service:
  name: home  # shown by system status

plugin_roots:
  - ./plugins
  - ./more

# the API
api:
  enabled: true
"""


def test_an_item_appended_to_a_list_goes_above_the_next_sections_blank_line_and_heading() -> None:
    assert set_value(FILE, ("plugin_roots", 2), "./third") == FILE.replace("  - ./more\n", "  - ./more\n  - ./third\n")


def test_a_key_added_to_a_mapping_goes_above_the_blank_line_and_its_neighbours_comment_stays() -> None:
    assert set_value(FILE, ("service", "log_level"), "debug") == FILE.replace(
        "system status\n", "system status\n  log_level: debug\n"
    )


def test_a_key_added_at_the_end_of_the_file_and_a_changed_key_leave_the_rest_as_it_was() -> None:
    assert set_value(FILE, ("api", "listen"), "127.0.0.1:8080") == FILE + "  listen: 127.0.0.1:8080\n"
    assert set_value(FILE, ("service", "name"), "work") == FILE.replace("name: home", "name: work")
    assert set_value(FILE, ("plugin_roots", 1), "./other") == FILE.replace("./more", "./other")


def test_a_new_section_goes_at_the_end_and_a_deleted_key_takes_only_its_own_line() -> None:
    assert set_value(FILE, ("webhooks", "listen"), "127.0.0.1:9000") == FILE + "webhooks:\n  listen: 127.0.0.1:9000\n"
    assert delete_value(FILE, ("api", "enabled")).startswith(FILE.split("api:")[0])
