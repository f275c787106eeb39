"""The Table 2 smoke sweep's report (``make smoke``): every row 1-19 ran, none is "not
implemented". Usage: python .ci/check_table2_smoke.py multirun/smoke/table2/report.csv"""

import csv
import sys

rows = [r for r in csv.DictReader(open(sys.argv[1], encoding="utf-8"))
        if r["paper_table"] == "table2"]
ran = {int(r["paper_row"]) for r in rows if int(r["completed"] or 0) > 0}
missing = sorted(set(range(1, 20)) - ran)
unimplemented = sorted({r["paper_row"] for r in rows if r["status"] == "not implemented"})
print(f"Table 2 smoke: {len(ran)} of 19 rows ran; missing {missing or 'none'}; "
      f"not implemented {unimplemented or 'none'}")
sys.exit(1 if missing or unimplemented else 0)
