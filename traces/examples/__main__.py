"""``python -m traces.examples``: write the bundled example traces again from the generator."""

from traces.examples import write_all

write_all()
