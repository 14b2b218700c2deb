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
# DHCP server messages from any source port, and by content (issue 12, 10)
MC=52:54:00:00:00:0c
ACK="BOOTP(op=2,yiaddr='10.77.0.50',chaddr=b'\\x52\\x54\\x00\\x00\\x00\\x0e')/DHCP(options=[('message-type','ack'),'end'])"
pair 'DHCP ACK from a non-server source port' e eth0 \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='255.255.255.255')/UDP(sport=6767,dport=68)/$ACK" \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='255.255.255.255')/UDP(sport=6767,dport=6768)/Raw(b'\\x02 not bootp')"
pair 'DHCP ACK from a none guest, non-server source port' e eth0 \
	"Ether(src='$MC',dst='$BC')/IP(src='10.77.0.12',dst='255.255.255.255')/UDP(sport=6767,dport=68)/$ACK" \
	"Ether(src='$MC',dst='$BC')/IP(src='10.77.0.12',dst='255.255.255.255')/UDP(sport=68,dport=67)/Raw(b'discover')" c
pair 'a BOOTP reply (DHCP cookie) to any port' e eth0 \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='255.255.255.255')/UDP(sport=6767,dport=6768)/$ACK" \
	"Ether(src='$MA',dst='$BC')/IP(src='10.77.0.10',dst='255.255.255.255')/UDP(sport=6767,dport=6768)/BOOTP(op=1)/DHCP(options=[('message-type','discover'),'end'])"
pair 'DHCPv6 reply from a non-server source port' e eth0 \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='$LLA',dst='ff02::1')/UDP(sport=5470,dport=546)/DHCP6_Reply()" \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='$LLA',dst='ff02::1')/UDP(sport=5470,dport=5460)/DHCP6_Reply()"
pair 'DHCPv6 advertise to the server port' e eth0 \
	"Ether(src='$MA',dst='33:33:00:01:00:02')/IPv6(src='$LLA',dst='ff02::1:2')/UDP(sport=5470,dport=547)/DHCP6_Advertise()" \
	"Ether(src='$MA',dst='33:33:00:01:00:02')/IPv6(src='$LLA',dst='ff02::1:2')/UDP(sport=546,dport=547)/DHCP6_Solicit()"

# IPv6 fragments from a tap (issue 12, 11): the first fragment of a TCP
# SYN to the ssh-only guest d whose TCP header sits in the second fragment
MD=52:54:00:00:00:0d
FRAG1="Ether(src='$MA',dst='$MD')/IPv6(src='fd77::a',dst='fd77::d')/IPv6ExtHdrFragment(id=7,m=1,offset=0)/IPv6ExtHdrDestOpt(nh=6,options=[PadN(optdata=b'\\x00'*230)])"
FRAG2="Ether(src='$MA',dst='$MD')/IPv6(src='fd77::a',dst='fd77::d')/IPv6ExtHdrFragment(id=7,nh=60,m=0,offset=30)/TCP(sport=4444,dport=22,flags='S')"
pair 'IPv6 first fragment hiding the TCP header (to ssh-only d)' d eth0 "$FRAG1" \
	"Ether(src='$MA',dst='$MD')/IPv6(src='fd77::a',dst='fd77::d')/$U"
pair 'IPv6 second fragment holding a TCP SYN to port 22' d eth0 "$FRAG2" \
	"Ether(src='$MA',dst='$MD')/IPv6(src='fd77::a',dst='fd77::d')/TCP(sport=4444,dport=80,flags='S')"
pair 'IPv6 fragment to an ordinary guest' e eth0 \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='fd77::a',dst='ff02::1')/IPv6ExtHdrFragment(id=8,m=1)/$U" \
	"Ether(src='$MA',dst='33:33:00:00:00:01')/IPv6(src='fd77::a',dst='ff02::1')/$U"

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
