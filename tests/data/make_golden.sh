#!/bin/sh
# Regenerates tests/data/golden/ (tiny model directories and their expected outputs) with the
# library as built in build/. Run only when a change of model results is intended.
set -eu
cd "$(dirname "$0")/../.."
ATTNKIT_WRITE_GOLDEN=1 build/attnkit_tests --gtest_filter='Models/Golden.*'
