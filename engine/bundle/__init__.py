"""`ascendctl bundle`: one redacted archive that a support engineer can act on.

builder (build_bundle) collects and writes it; layout says what it holds and where, and finds the
logs of one (cheap to import: triage asks it about every path). Nothing is re-exported here, so
importing one of them never loads the other.
"""
