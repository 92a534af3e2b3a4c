"""What several test files share: running commands as a user would, building the smoke pipeline,
and reading the library's import graph. Fixtures stay in ``conftest.py``; the code lives here."""
