# cloudinit_eni.py: render a network-config (v2 YAML on stdin) with the
# cloud-init installed here (Debian's python3 cloud-init, the one the guest
# image carries) into /etc/network/interfaces, as a Debian guest's
# cloud-init does, and print it. Used by test_agent_seed.
import os
import sys
import tempfile

import yaml
from cloudinit.net import eni, network_state

ns = network_state.parse_net_config_data(yaml.safe_load(sys.stdin))
with tempfile.TemporaryDirectory() as d:
    eni.Renderer({"eni_path": "etc/network/interfaces", "netrules_path": None,
                  "links_path_prefix": None}).render_network_state(ns, target=d)
    with open(os.path.join(d, "etc/network/interfaces")) as f:
        sys.stdout.write(f.read())
