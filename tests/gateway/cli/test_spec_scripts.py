"""The operator scripts spec 000 prints ("Health Check", Step 3 and Step 4; "Operator Handbook",
1 and 2) run as printed against `ductile job logs --json`: they read the original's field names
(`Status`, `Plugin`, `CreatedAt`, `LastError`, `Stderr`, `Result`, `JobID`, `Command`, `Attempt`).
The spec's renderer lost the scripts' line breaks and its `<plugin>` placeholders; they are put back
here and nothing else is changed. `ductile` is the console script, found on PATH as the spec's
reader would have it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.processes import cli_env, ductile, ductile_json

pytestmark = pytest.mark.process

FAILURES_24H = """
ductile job logs --from $(date -u -d '24 hours ago' --rfc-3339=seconds | tr ' ' 'T') \\
  --limit 200 --json | \\
python3 -c "
import json,sys
d=json.load(sys.stdin)
logs=d['logs'] or []
fails=[l for l in logs if l['Status']=='failed']
print(f'Total jobs: {d[\\"total\\"]}  Failures: {len(fails)}')
for f in fails:
    print(f'  {f[\\"Plugin\\"]:25} {f[\\"CreatedAt\\"][:16]}  {f[\\"LastError\\"]}')
"
"""

PLUGIN_HISTORY = """
FROM=$(date -u -d '24 hours ago' --rfc-3339=seconds | tr ' ' 'T')
ductile job logs --from $FROM --plugin stress --limit 200 --json | python3 -c "
import json,sys
from collections import Counter
d=json.load(sys.stdin)
logs=d['logs'] or []
statuses=Counter(l['Status'] for l in logs)
print(f'Total: {d[\\"total\\"]}  Statuses: {dict(statuses)}')
if logs:
    print(f'Oldest: {logs[-1][\\"CreatedAt\\"][:16]}')
    print(f'Newest: {logs[0][\\"CreatedAt\\"][:16]}')
for l in logs:
    if l['Status'] == 'failed':
        print(f'  FAIL {l[\\"CreatedAt\\"][:16]}  {l[\\"LastError\\"]}')
"
"""

FAILED_IDS_AND_RESULTS = """
FROM=$(date -u -d '24 hours ago' --rfc-3339=seconds | tr ' ' 'T')
ductile job logs --from $FROM --plugin stress --limit 50 --json | python3 -c "
import json,sys
d=json.load(sys.stdin)
for l in (d['logs'] or []):
    if l['Status'] == 'failed':
        print(l['JobID'], l['CreatedAt'][:16], l.get('LastError',''))
"
ductile job logs --from $FROM --plugin stress --limit 50 --json --include-result | python3 -c "
import json,sys
d=json.load(sys.stdin)
for l in (d['logs'] or []):
    if l['Status'] == 'failed':
        print('=== FAILED JOB', l['JobID'][:8], l['CreatedAt'][:16], '===')
        print(json.dumps(l.get('Result'), indent=2))
        if l.get('Stderr'):
            print('STDERR:', l['Stderr'])
"
"""

HEALTH_CHECK_STEPS_3_AND_4 = """
FROM=$(date -u -d '24 hours ago' +%Y-%m-%dT%H:%M:%SZ)
for plugin in echo stress; do
  ductile job logs --from "$FROM" --plugin "$plugin" --limit 200 --json 2>/dev/null \\
    | python3 -c "
import sys,json
d=json.load(sys.stdin)
logs=d.get('logs') or []
total=d.get('total',0)
succ=sum(1 for j in logs if j.get('Status')=='succeeded')
fail=sum(1 for j in logs if j.get('Status')=='failed')
print(f'{\\"$plugin\\":<22} total={total:<4} in_window={len(logs)} succ={succ:<4} fail={fail}')
"
done
ductile job logs --from "$FROM" --plugin stress --limit 200 --include-result --json 2>/dev/null \\
  | python3 -c "
import sys,json
d=json.load(sys.stdin)
for j in d.get('logs',[]):
    if j.get('Status')=='failed':
        print(f\\"  {j.get('CreatedAt')} cmd={j.get('Command')} attempt={j.get('Attempt')}\\")
        for k in ('LastError','Stderr'):
            v=j.get(k) or ''
            if v:
                print(f'    {k}:', v[:300])
        res=j.get('Result')
        if res:
            print('    Result:', json.dumps(res)[:300])
"
"""


@pytest.fixture
def ran(config_dir: ConfigDir) -> tuple[ConfigDir, str]:
    """One job that succeeded and one that failed for good; the failed one's id."""
    config_dir.write()
    assert ductile(config_dir, "plugin", "run", "echo").returncode == 0
    _, failed = ductile_json(config_dir, "plugin", "run", "stress", "--payload", '{"mode": "retry_false"}')
    return config_dir, failed["job_id"]


def script(cfg: ConfigDir, text: str) -> str:
    env = cli_env(cfg, DUCTILE_CONFIG_DIR=str(cfg.path))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `ductile`, the console script
    run = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_operator_handbook_scripts_run_as_printed(ran):
    cfg, failed = ran
    out = script(cfg, FAILURES_24H)
    assert "Total jobs: 2  Failures: 1" in out
    assert "stress" in out and "permanent input error" in out
    out = script(cfg, PLUGIN_HISTORY)
    assert "Total: 1  Statuses: {'failed': 1}" in out and "FAIL" in out
    out = script(cfg, FAILED_IDS_AND_RESULTS)
    assert out.splitlines()[0].startswith(failed)
    assert f"=== FAILED JOB {failed[:8]}" in out and '"error": "permanent input error"' in out


def test_the_health_check_scripts_run_as_printed(ran):
    cfg, _ = ran
    out = script(cfg, HEALTH_CHECK_STEPS_3_AND_4)
    assert "echo                   total=1    in_window=1 succ=1    fail=0" in out
    assert "stress                 total=1    in_window=1 succ=0    fail=1" in out
    assert "cmd=poll attempt=1" in out and "LastError: permanent input error" in out
