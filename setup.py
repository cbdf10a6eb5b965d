"""The package's three source roots (pyproject.toml holds everything else; docs/decisions.md, "Layout").

src/cudanalyst is the core; operator/cudanalyst/operator and runner/cudanalyst/runner are the two components, kept
at the checkout root as the project's card lays it out. The root folders have no __init__.py, so they never shadow
the standard library's `operator` from the root, and an editable install maps each component to its folder (a new
file or subpackage needs no reinstall).
"""

from pathlib import Path

from setuptools import find_packages, setup

COMPONENTS = {"cudanalyst.operator": "operator/cudanalyst/operator", "cudanalyst.runner": "runner/cudanalyst/runner"}

# An image leaves one component's root out (Dockerfile): that component is then not part of the install.
present = {name: folder for name, folder in COMPONENTS.items() if (Path(folder) / "__init__.py").is_file()}
packages = find_packages("src")
for name, folder in present.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir={"": "src", **present})
