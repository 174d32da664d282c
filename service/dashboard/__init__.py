"""The team dashboard, served by the control service itself (see mount.py)."""

from .mount import DASHBOARD_PATH, STATIC_DIR, mount_dashboard

__all__ = ["DASHBOARD_PATH", "STATIC_DIR", "mount_dashboard"]
