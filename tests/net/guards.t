# guards.t: every tap guard, with real frames. Each forbidden frame is sent
# from a guest namespace and must not arrive; its legitimate counterpart
# must. Receivers: guest e's eth0 (a forwarded frame) or the host's bcbr0
# (a frame the bridge passes up to the host).
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/lib.sh"

net_require
net_setup
net_spec "$NET_TMP/spec.json"

MA=52:54:00:00:00:0a
BC=ff:ff:ff:ff:ff:ff
LLA=fe80::5054:ff:fe00:a
U='UDP(sport=4000,dport=4001)/Raw(b"bc-net-test")'

# control: without the rules a spoofed frame does arrive
isnt "$(arrives a e eth0 "Ether(src='52:54:00:00:00:99',dst='$BC')/IP(src='10.77.0.99',dst='10.77.0.255')/$U")" 0 \
	'control: before the ruleset is loaded a spoofed frame arrives'
out=$(net_apply "$NET_TMP/spec.json")
ok $? 'ruleset loaded'

# pair NAME RECV_NS RECV_IF FORBIDDEN LEGIT [FROM]: the forbidden frame
# never arrives, the legitimate one does
pair() {
	local name=$1 rns=$2 rif=$3 bad=$4 good=$5 from=${6:-a}
	is "$(arrives "$from" "$rns" "$rif" "$bad")" 0 "$name: forbidden frame dropped"
	isnt "$(arrives "$from" "$rns" "$rif" "$good")" 0 "$name: legitimate frame arrives"
}

pair 'MAC spoof' e eth0 \
	"Ether(src='52:54:00:00:00:99',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/$U" \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/$U"
pair 'IPv4 spoof' e eth0 \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.99',dst='10.77.0.255')/$U" \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/$U"
pair 'IPv4 unspecified source (DHCP) allowed, other guest source not' e eth0 \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.11',dst='255.255.255.255')/$U" \
	"Ether(src='$MA',dst='$BC')/IP(src='0.0.0.0',dst='255.255.255.255')/UDP(sport=68,dport=67)"
pair 'IPv6 spoof' e eth0 \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='fd77::99',dst='ff02::1')/$U" \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='fd77::a',dst='ff02::1')/$U"
pair 'IPv6 link-local: only the EUI-64 one' e eth0 \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='fe80::99',dst='ff02::1')/$U" \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='$LLA',dst='ff02::1')/$U"
pair 'ARP spoof (another guest address)' e eth0 \
	"Ether(src='$MA',dst='$BC')/ARP(op=2,hwsrc='$MA',psrc='10.77.0.11',hwdst='$BC',pdst='10.77.0.11')" \
	"Ether(src='$MA',dst='$BC')/ARP(op=2,hwsrc='$MA',psrc='10.77.0.10',hwdst='$BC',pdst='10.77.0.10')"
pair 'ARP with a foreign sender MAC' e eth0 \
	"Ether(src='$MA',dst='$BC')/ARP(op=1,hwsrc='52:54:00:00:00:0b',psrc='10.77.0.10',pdst='10.77.0.50')" \
	"Ether(src='$MA',dst='$BC')/ARP(op=1,hwsrc='$MA',psrc='10.77.0.10',pdst='10.77.0.50')"
pair 'neighbour advert for another guest address' e eth0 \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='$LLA',dst='ff02::1')/ICMPv6ND_NA(tgt='fd77::b',R=0)" \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='$LLA',dst='ff02::1')/ICMPv6ND_NA(tgt='fd77::a',R=0)"
pair 'DHCP server reply' e eth0 \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='255.255.255.255')/UDP(sport=67,dport=68)/Raw(b'offer')" \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='255.255.255.255')/UDP(sport=68,dport=67)/Raw(b'discover')"
pair 'DHCPv6 server reply' e eth0 \
	"Ether(src='$MA',dst='33:33:00:01:00:02')/IPv6(src='$LLA',dst='ff02::1:2')/UDP(sport=547,dport=546)" \
	"Ether(src='$MA',dst='33:33:00:01:00:02')/IPv6(src='$LLA',dst='ff02::1:2')/UDP(sport=546,dport=547)"
pair 'router advertisement (a solicitation passes)' e eth0 \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='$LLA',dst='ff02::1')/ICMPv6ND_RA()" \
	"Ether(src='$MA',dst='33:33:00:00:00:02')/IPv6(src='$LLA',dst='ff02::2')/ICMPv6ND_RS()"
pair 'IPv4 redirect' e eth0 \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/ICMP(type=5,code=1,gw='10.77.0.10')" \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/ICMP(type=8)"
pair 'VLAN-tagged frame' e eth0 \
	"Ether(src='$MA',dst='$BC')/Dot1Q(vlan=5)/IP(src='10.77.0.10',dst='10.77.0.255')/$U" \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/$U"

# The host's addresses, from an unguarded tap (e has no IPAM addresses)
ME=52:54:00:00:00:0e
pair "the host's IPv4 address from an unguarded tap" h bcbr0 \
	"Ether(src='$ME',dst='$BC')/IP(src='10.77.0.1',dst='10.77.0.255')/$U" \
	"Ether(src='$ME',dst='$BC')/IP(src='10.77.0.50',dst='10.77.0.255')/$U" e
pair "ARP claiming the host's address" h bcbr0 \
	"Ether(src='$ME',dst='$BC')/ARP(op=2,hwsrc='$ME',psrc='10.77.0.1',pdst='10.77.0.1')" \
	"Ether(src='$ME',dst='$BC')/ARP(op=2,hwsrc='$ME',psrc='10.77.0.50',pdst='10.77.0.50')" e
pair "the host's IPv6 address from an unguarded tap" h bcbr0 \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::1',dst='ff02::1')/$U" \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::50',dst='ff02::1')/$U" e
pair "neighbour advert naming the host's address" h bcbr0 \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::50',dst='ff02::1')/ICMPv6ND_NA(tgt='fd77::1',R=0)" \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::50',dst='ff02::1')/ICMPv6ND_NA(tgt='fd77::50',R=0)" e

# Binding: a guarded address is usable from its own tap only
pair 'bound IPv4 address from another port' h bcbr0 \
	"Ether(src='$ME',dst='$BC')/IP(src='10.77.0.10',dst='10.77.0.255')/$U" \
	"Ether(src='$ME',dst='$BC')/IP(src='10.77.0.50',dst='10.77.0.255')/$U" e
pair 'bound address claimed in ARP from another port' h bcbr0 \
	"Ether(src='$ME',dst='$BC')/ARP(op=2,hwsrc='$ME',psrc='10.77.0.10',pdst='10.77.0.10')" \
	"Ether(src='$ME',dst='$BC')/ARP(op=2,hwsrc='$ME',psrc='10.77.0.50',pdst='10.77.0.50')" e
pair 'bound IPv6 address from another port' h bcbr0 \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::a',dst='ff02::1')/$U" \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::50',dst='ff02::1')/$U" e
pair 'bound link-local named in an advert from another port' h bcbr0 \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::50',dst='ff02::1')/ICMPv6ND_NA(tgt='$LLA',R=0)" \
	"Ether(src='$ME',dst='33:33:00:00:00:01')/IPv6(src='fd77::50',dst='ff02::1')/ICMPv6ND_NA(tgt='fd77::50',R=0)" e

# Ordinary traffic between guarded guests still works (ARP, ND, ICMP)
in_g a ping -c1 -W2 -q 10.77.0.13 >/dev/null
ok $? 'guest a pings guest d (ARP resolution through the guards)'
in_g a ping -6 -c1 -W2 -q fd77::d >/dev/null
ok $? 'guest a pings guest d over IPv6 (neighbour discovery through the guards)'
in_g a ping -c1 -W2 -q 10.77.0.1 >/dev/null
ok $? 'guest a pings the host'

done_testing
