"""The `_search` gateway and native engine integrations."""
