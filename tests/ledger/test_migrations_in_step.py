"""The models and the migrations say the same thing: a model change merged without its migration
(or two branches' migrations left unmerged) fails here, not on an operator's `ductile migrate`."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration_and_the_graph_has_one_leaf_per_app():
    out = io.StringIO()
    # --check exits non-zero (SystemExit) when a migration is missing; a graph with two leaves
    # in one app raises CommandError ("Conflicting migrations detected").
    call_command("makemigrations", check=True, dry_run=True, stdout=out, stderr=out)
    assert "No changes detected" in out.getvalue()
