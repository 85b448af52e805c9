"""Stand-in for ``omnigibson.lazy``: only ``lazy.isaacsim.SimulationApp`` (Kit's app, built at launch)."""

from types import SimpleNamespace

launches = []  # the config of every SimulationApp built in this process


class SimulationApp:
    def __init__(self, config, experience=""):
        launches.append(dict(config))
        self.config = config


isaacsim = SimpleNamespace(SimulationApp=SimulationApp)
