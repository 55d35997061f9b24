"""neox-epoch: exact epochs for GPT-NeoX and megatron-core pretraining.

The version is ``neox_epoch.__version__`` (read here, not imported: the package needs numpy). The shipped
``configs/`` install as ``neox_epoch/configs`` (``neox-epoch demo`` plans them from an installed package).
MANIFEST.in lists what the sdist carries besides the package: tests, docs, configs, scripts, the C sources.
"""

import os
import re

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read(*parts: str) -> str:
    with open(os.path.join(HERE, *parts), encoding="utf-8") as f:
        return f.read()


def version() -> str:
    found = re.search(r'^__version__ = "([^"]+)"$', read("neox_epoch", "__init__.py"), re.M)
    if found is None:
        raise SystemExit('setup.py: neox_epoch/__init__.py has no line __version__ = "X.Y.Z"')
    return found.group(1)


setup(
    name="neox-epoch",
    version=version(),
    description="Train for exactly N passes over your data with GPT-NeoX and megatron-core: plan, audit, hook.",
    long_description=read("README.md"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    keywords=["gpt-neox", "megatron", "megatron-core", "deepspeed", "pretraining", "epochs", "data"],
    classifiers=[
        "Development Status :: 4 - Beta",
        "Environment :: Console",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: C",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Typing :: Typed",
    ],
    python_requires=">=3.10",
    packages=[*find_packages(include=["neox_epoch", "neox_epoch.*"]), "neox_epoch.configs"],
    package_dir={"neox_epoch.configs": "configs"},
    package_data={
        "neox_epoch": ["py.typed", "data/*.json", "data/megatron_flags/*.json"],
        "neox_epoch.configs": ["*.yml"],
    },
    ext_modules=[
        Extension(
            "neox_epoch._greedy",
            sources=["neox_epoch/_greedy.c"],
            extra_compile_args=["-O3", "-ffp-contract=off", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        ),
        Extension(
            "neox_epoch._mapguard",
            sources=["neox_epoch/_mapguard.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "neox_epoch._exposure",
            sources=["neox_epoch/_exposure.c"],
            extra_compile_args=["-O3", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        ),
    ],
    # numpy: tested on 1.22.4 (Python 3.10), 1.26.4 (3.11, GPT-NeoX's pin) and 2.5.5 (3.12); public API only
    install_requires=["numpy>=1.22", "pyyaml>=5.4"],
    # no version pins on deepspeed or torch: GPT-NeoX's environment has its own DeepSpeed fork (DeeperSpeed, a git
    # install) and torch, which an extra must never replace (README: Install)
    extras_require={
        "neox": ["deepspeed", "torch"],
        "megatron-core": ["megatron-core>=0.10", "torch"],
        "deepspeed": ["deepspeed", "torch"],
        "dev": ["pytest", "ruff", "hypothesis", "mypy"],
    },
    entry_points={"console_scripts": ["neox-epoch=neox_epoch.cli:main"]},
)
