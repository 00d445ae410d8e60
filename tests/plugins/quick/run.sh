#!/bin/sh
# Answers at once: a drain of hundreds of jobs a second, far more than the daemon's main loop passes.
cat >/dev/null; printf '{"status":"ok","result":"x"}'
