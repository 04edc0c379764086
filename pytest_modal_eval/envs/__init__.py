"""verifiers environments bundled with the plugin (no installation, no network)."""
