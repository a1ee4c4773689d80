"""The browser dashboard: static files served at /ui; it calls only the tenant-scoped API."""
