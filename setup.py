"""neox-epoch: exact epochs for GPT-NeoX and megatron-core pretraining."""

from setuptools import Extension, find_packages, setup

setup(
    name="neox-epoch",
    version="0.1.0",
    description="Train for exactly N passes over your data with GPT-NeoX and megatron-core: plan, audit, hook.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["neox_epoch", "neox_epoch.*"]),
    package_data={"neox_epoch": ["py.typed", "data/*.json", "data/megatron_flags/*.json"]},
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
    extras_require={
        "neox": ["deepspeed", "torch"],
        "megatron-core": ["megatron-core>=0.10", "torch"],
        "deepspeed": ["deepspeed>=0.14", "torch"],
        "plot": ["matplotlib"],
        "dev": ["pytest", "ruff", "hypothesis"],
    },
    entry_points={"console_scripts": ["neox-epoch=neox_epoch.cli:main"]},
)
