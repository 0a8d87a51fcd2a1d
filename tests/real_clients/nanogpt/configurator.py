"""The poor man's configurator, nanoGPT style: exec'd by train.py into its globals.

`python train.py [config_file.py] --key=value ...`: a file argument is exec'd, then each
--key=value overrides the global `key`, evaluated as a Python literal when it parses as one (the
type must match the default's) and kept as a string otherwise.
"""

import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if not arg.startswith("--"):
        print(f"Overriding config with {arg}")
        with open(arg) as f:
            exec(f.read())
        continue
    key, _, val = arg[2:].partition("=")
    if key not in globals():
        raise ValueError(f"Unknown config key: {key}")
    try:
        new = literal_eval(val)
    except (SyntaxError, ValueError):
        new = val
    old = globals()[key]
    if isinstance(old, float) and isinstance(new, int) and not isinstance(new, bool):
        new = float(new)
    assert type(new) == type(old), f"--{key}: expected {type(old).__name__}, got {val!r}"
    print(f"Overriding: {key} = {new!r}")
    globals()[key] = new
