"""``python -m sparsegnn`` (what ``torchrun -m sparsegnn`` runs) is the CLI.

A torchrun worker leaves without the interpreter's teardown once its command has
returned: by then the process group is destroyed, every file is closed and the result
printed, and what teardown still does (destructors of gloo's and c10d's threads) aborted
a few percent of finished ranks here ("terminate called without an active exception")
or, once in CI, hung a finished rank until the job's time ran out. Its exit code is the
command's."""

import logging
import os
import sys

from sparsegnn.cli.main import main

if __name__ == "__main__":
    code = main()
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)
