"""A test client for ``kale web`` that talks as the dashboard does: to a
loopback host, with the header state-changing requests need."""
from starlette.testclient import TestClient

#: What the dashboard sends with every request.
DASHBOARD_HEADERS = {'X-Kale-Request': '1'}


def api_client(app, **headers) -> TestClient:
    return TestClient(app, base_url='http://127.0.0.1', headers={**DASHBOARD_HEADERS, **headers})
