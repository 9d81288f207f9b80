#!/usr/bin/env bash
# Session 36, call 3: the session's final kernels (the forward plan, the diagonal tile's QKᵀ in one place) through the
# GPU tests of the fast path, the prefix tests among them, then the issue's table: session 35 call 5's phases.
#   bash scripts/device/session36_call3.sh   (carry .gpu)
exec bash scripts/device/session35_call5.sh
