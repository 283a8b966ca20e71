"""Fleet mode: many tables at once (discovery, ranked health, budgeted maintenance, summaries)."""
