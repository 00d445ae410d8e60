"""Where a job runs: the worker daemon claims a job, dispatch spawns its plugin (runner, protocol),
and the outcome is recorded with its routed successors; the reaper and lifeline keep plugin
processes from outliving their job."""
