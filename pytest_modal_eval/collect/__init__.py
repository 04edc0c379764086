"""Collection and items: a benchmark YAML becomes a test item whose examples are subtests."""
