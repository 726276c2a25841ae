import pytest

from tests.spawned import InProcessServer, ServerProcess


@pytest.fixture
def server():
    """The real server in-process over pipes, initialized."""
    srv = InProcessServer()
    srv.host.initialize()
    yield srv
    srv.stop()


@pytest.fixture
def host(server):
    return server.host


@pytest.fixture
def make_server():
    """Factory for in-process servers with settings; all are stopped at the end."""
    made = []

    def make(initialize: bool = True, **settings):
        srv = InProcessServer(**settings)
        if initialize:
            srv.host.initialize()
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.stop()


@pytest.fixture
def spawn_process():
    """Factory for `python -m subagentd` subprocesses; all are stopped at the end."""
    made = []

    def spawn(*args, **kwargs):
        proc = ServerProcess(*args, **kwargs)
        made.append(proc)
        return proc

    yield spawn
    for proc in made:
        proc.stop()
