"""The benchmark stage's outputs: tables, plots' data and summary.json."""
