"""Spark tests (a package, so its conftest is not the bare `conftest` module other folders import)."""
