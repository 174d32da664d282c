"""Webhooks: which job events notify, their bodies and endpoints, and the dispatch from the event log."""
