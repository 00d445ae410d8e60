"""The models and the migrations say the same thing: a model change merged without its migration
(or two branches' migrations left unmerged) fails here, not on an operator's `ductile migrate`."""

from __future__ import annotations

import io

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader

from gateway.storage.database import migrations_package


@pytest.mark.django_db
def test_every_model_change_has_its_migration_and_the_graph_has_one_leaf_per_app():
    out = io.StringIO()
    # --check exits non-zero (SystemExit) when a migration is missing; a graph with two leaves
    # in one app raises CommandError ("Conflicting migrations detected").
    call_command("makemigrations", check=True, dry_run=True, stdout=out, stderr=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.parametrize("modules", [{}, {"ledger": "ledger.elsewhere", "auth": None}])
def test_the_start_ups_quick_look_reads_the_packages_the_migration_loader_reads(settings, modules):
    """gateway.storage.database reads each app's migration files without importing Django's
    loader: it must name the package the loader would, or a current database could be called
    behind (or one behind, current)."""
    settings.MIGRATION_MODULES = modules
    for app in apps.get_app_configs():
        assert migrations_package(app.label, app.name) == MigrationLoader.migrations_module(app.label)[0]
