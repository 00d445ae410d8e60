# Sourced by scripts/demo and scripts/test: a .venv with the project installed, idempotently.
# DUCTILE_PROFILE picks what is installed: "run" (the gateway alone: scripts/demo) or "test" (the
# gateway and the test toolchain: scripts/test). A .venv set up for tests serves the demo too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
profile="${DUCTILE_PROFILE:-run}"
case "$profile" in
  run) extras="" ;;
  test) extras="[test]" ;;
  *) echo "error: DUCTILE_PROFILE must be run or test, not '$profile'" >&2; exit 2 ;;
esac
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PY="$candidate"; break; fi
  done
fi
[ -n "$PY" ] || { echo "error: Python 3.11 is required (python3.11 or python3 on PATH)" >&2; exit 2; }
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
deps=$(cksum < pyproject.toml | cut -d' ' -f1)
if [ ! -f ".venv/.installed-$profile-$deps" ] && [ ! -f ".venv/.installed-test-$deps" ]; then
  echo "Installing the $profile profile into .venv (once; later runs skip this)..." >&2
  # uv resolves and installs in parallel, several times faster than pip; pip stays the fallback
  # (uv cannot be installed, or cannot reach the index).
  if .venv/bin/python -m pip install --quiet --disable-pip-version-check uv \
    && .venv/bin/python -m uv pip install --quiet --python .venv/bin/python -e ".$extras"; then
    :
  else
    echo "uv was not usable; installing with pip instead" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".$extras"
  fi
  # Bytecode now, once: an installer may skip it (uv does; pip does under PYTHONDONTWRITEBYTECODE),
  # and then every gateway process and CLI call compiles Django again (~0.8 s of CPU each).
  .venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null 2>&1 || true
  rm -f .venv/.installed-* && touch ".venv/.installed-$profile-$deps"
fi
# The project's own modules too, when changed (a no-op otherwise, ~0.1 s).
.venv/bin/python -m compileall -q -j 0 manage.py ductile_site gateway ledger pipelines >/dev/null || true
# Static files are collected (hashed, compressed) for the gateway to serve: after an install, and
# whenever a file under static/ is newer than the last collection.
manifest="${DUCTILE_STATIC_ROOT:-.static}/staticfiles.json"
if [ ! -f "$manifest" ] || [ -n "$(find static .venv/.installed-* -newer "$manifest" -print -quit)" ]; then
  .venv/bin/python manage.py collectstatic --noinput --verbosity 0
fi
export PATH="$PWD/.venv/bin:$PATH"
