"""Only what pyproject.toml cannot say: install ``traindoc-autostart.pth`` at the top of
site-packages, the one line that makes ``TRAINDOC=1 python train.py`` work
(src/traindoc/_autostart.py). Everything else about the package is in pyproject.toml."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "traindoc-autostart.pth"
# Runs at every Python start-up: with TRAINDOC unset it is one environment lookup.
LINE = ("import os; os.environ.get('TRAINDOC', '').strip().lower() not in ('', '0', 'false', 'no', 'off') "
        "and __import__('traindoc._autostart')._autostart.install()\n")


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        # A wheel's top level is build_lib; an editable wheel (pip install -e, PEP 660) is made
        # from the install folder instead and drops build_lib.
        folder = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, PTH), "w", encoding="utf-8") as f:
            f.write(LINE)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else [*outputs, os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
