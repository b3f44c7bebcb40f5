"""Interactive what-if dashboards (Dash app and self-contained HTML export)."""
