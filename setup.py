"""Maps the top-level folders onto one distribution (metadata lives in pyproject.toml).

A top-level package named `operator` would shadow the standard library's `operator` module, so
`operator/` and `runner/` become `cudanalyst.operator` and `cudanalyst.runner`; the shared core
lives in `src/cudanalyst` so that a checkout's working directory never shadows the installed package.
"""

from setuptools import find_packages, setup

ROOTS = {"cudanalyst": "src/cudanalyst", "cudanalyst.operator": "operator", "cudanalyst.runner": "runner"}

packages = []
for name, path in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(path)]

setup(packages=packages, package_dir=ROOTS)
