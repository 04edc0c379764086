"""Statistics of rewards: clustered summaries with intervals, and paired comparisons."""
