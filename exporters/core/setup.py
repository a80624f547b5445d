"""The optional native part (`tokenscope_exporter/_native.c`): built when a C compiler and
Python's headers are there, skipped otherwise (`optional`), the exporter then packing in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tokenscope_exporter._native", ["tokenscope_exporter/_native.c"], optional=True)])
