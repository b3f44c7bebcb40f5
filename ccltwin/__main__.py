"""``python -m ccltwin``: the same as the ``ccltwin`` command."""

from ccltwin import main

main()
