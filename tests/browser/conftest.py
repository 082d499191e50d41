"""tests/browser: playwright-core (node_modules) holds no Python tests."""

collect_ignore = ["node_modules"]
