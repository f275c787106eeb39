"""Add test predictions to finished runs from their best checkpoints (runs made before runs
recorded them): ``python src/add_predictions.py RUN [RUN ...] [data.files.test=PATH]``.

See ``entailment_lab.predictions`` for the stored form and the checks.
"""

import sys

from entailment_lab.predictions import main

if __name__ == "__main__":
    sys.exit(main())
