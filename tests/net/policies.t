# policies.t: network_policy private and none, and ssh_from_host_only, with
# real ICMP and TCP between the guest namespaces and the host namespace.
#   b private: the pool subnet only; c none: the host's bridge addresses only;
#   d egress with ssh_from_host_only; a and e egress.
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/spec.json"
net_apply "$NET_TMP/spec.json" >/dev/null
ok $? 'ruleset loaded'

pings() { in_g "$1" ping -c1 -W1 -q "$2" >/dev/null 2>&1; }
host_pings() { in_h ping -c1 -W1 -q "$1" >/dev/null 2>&1; }

# egress (a): everywhere, including the host's address off the bridge
pings a 10.77.0.50;  ok $? 'egress: a reaches another guest'
pings a 192.0.2.1;   ok $? 'egress: a reaches an address outside the pool'

# private (b)
pings b 10.77.0.10;  ok $? 'private: b reaches a guest in the pool subnet'
pings b 10.77.0.1;   ok $? 'private: b reaches the host on the bridge'
pings b 192.0.2.1;   ok $((! $?)) 'private: b cannot reach outside the pool subnet'
in_g b ping -6 -c1 -W1 -q fd77::a >/dev/null 2>&1
ok $? 'private: b reaches a guest in the IPv6 subnet'
in_g b ping -6 -c1 -W1 -q 2001:db8::1 >/dev/null 2>&1
ok $((! $?)) 'private: b cannot reach outside the IPv6 subnet'
pings a 10.77.0.11;  ok $? 'private: a guest of the pool reaches b'

# none (c)
pings c 10.77.0.1;   ok $? 'none: c reaches the host bridge address'
pings c 10.77.0.10;  ok $((! $?)) 'none: c cannot reach another guest'
pings c 192.0.2.1;   ok $((! $?)) 'none: c cannot reach outside'
pings a 10.77.0.12;  ok $((! $?)) 'none: another guest cannot reach c'
host_pings 10.77.0.12; ok $? 'none: the host reaches c'

# ssh_from_host_only (d): tcp/22 only from the host's bridge addresses
listen d 22 80
listen e 22
tcp_ok h 10.77.0.13 22 10.77.0.1;    ok $? 'ssh-only: host -> d:22 from its bridge address'
tcp_ok h 10.77.0.13 22 192.0.2.1;    ok $((! $?)) 'ssh-only: host -> d:22 from an address off the bridge dropped'
tcp_ok h 10.77.0.13 80 192.0.2.1;    ok $? 'ssh-only: host -> d:80 from that address passes (control)'
tcp_ok a 10.77.0.13 22;              ok $((! $?)) 'ssh-only: guest a -> d:22 dropped'
tcp_ok a 10.77.0.13 80;              ok $? 'ssh-only: guest a -> d:80 passes'
tcp_ok e 10.77.0.13 22;              ok $((! $?)) 'ssh-only: unguarded guest e -> d:22 dropped'
tcp_ok h fd77::d 22 fd77::1;         ok $? 'ssh-only: host -> [d]:22 over IPv6 from its bridge address'
tcp_ok h fd77::d 22 2001:db8::1;     ok $((! $?)) 'ssh-only: host -> [d]:22 from an IPv6 address off the bridge dropped'
tcp_ok a fd77::d 22;                 ok $((! $?)) 'ssh-only: guest a -> [d]:22 over IPv6 dropped'
tcp_ok a 10.77.0.50 22;              ok $? 'an ordinary instance (e) takes tcp/22 from a guest'

# with no host address of a family, that family's tcp/22 is dropped outright
in_h ip addr del fd77::1/64 dev bcbr0
in_h ip -6 addr flush dev bcbr0 scope link
net_apply "$NET_TMP/spec.json" >/dev/null
ok $? 'reloaded with no IPv6 address on the bridge'
in_h ip -6 route add fd77::/64 dev bcbr0 2>/dev/null
tcp_ok h fd77::d 22 2001:db8::1;     ok $((! $?)) 'no host IPv6 on the bridge: IPv6 tcp/22 into d dropped'
tcp_ok h 10.77.0.13 22 10.77.0.1;    ok $? 'IPv4 tcp/22 from the host bridge address still passes'

done_testing
