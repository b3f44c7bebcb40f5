"""ccltwin's tests, one folder per package; a package so that ``tests/twin`` never shadows ``twin``."""
