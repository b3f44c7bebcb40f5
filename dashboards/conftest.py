"""pytest --doctest-modules: the pages register themselves with the Dash app that imports them
(``dash.register_page``), so they are imported by ``dashboards.app`` and the browser tests, not
collected on their own."""

collect_ignore_glob = ["pages/*.py"]
