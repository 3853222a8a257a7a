#!/usr/bin/perl
# compare-proxies.pl: runs 46-smuggling.t's table of request shapes through nginx and
# HAProxy, each bound to 127.0.0.1 as a reverse proxy in front of the same RawBrokers
# (lib/RawBroker.pm), and prints what each did with every shape: the statuses the client
# got, whether the proxy closed, and what the broker parsed. It is how the table's "note"
# column was filled in. Optional, never run by CI (nothing here ends in .t).
#
#   apt-get install nginx-light haproxy      # Debian 12: nginx 1.22, HAProxy 2.6
#   perl tests/integration/tools/compare-proxies.pl [REGEX] > compare.txt
#
# Plain TCP only: TLS termination does not change how either parses a request.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

use Lookout;
use RawBroker;

require "$FindBin::Bin/../46-smuggling.t";

my $only = shift;
my $dir = tempdir('compare-proxies-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my @b = map { RawBroker->start(dir => $dir, name => $_, port => free_port()) } qw(b1 b2);
my $ctx = Smuggling::ctx();
$ctx->{brokers} = \@b;
$ctx->{internal} = { map { $_->name => $_->addr } @b };

my %proxy;
my ($pn, $ph) = free_ports(2);

if (-x '/usr/sbin/nginx') {
    spew("$dir/nginx.conf", <<"EOF2");
daemon off;
master_process off;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $dir/nginx-body;
    proxy_temp_path $dir/nginx-proxy;
    upstream b1 { server $b[0]{host}:$b[0]{port}; keepalive 4; }
    upstream b2 { server $b[1]{host}:$b[1]{port}; keepalive 4; }
    server { listen 127.0.0.1:$pn default_server; return 421; }
    server {
        listen 127.0.0.1:$pn; server_name b1.lookout.test;
        location / { proxy_pass http://b1; proxy_http_version 1.1; proxy_set_header Connection "";
                     proxy_set_header Host \$http_host; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; }
    }
    server {
        listen 127.0.0.1:$pn; server_name b2.lookout.test;
        location / { proxy_pass http://b2; proxy_http_version 1.1; proxy_set_header Connection "";
                     proxy_set_header Host \$http_host; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; }
    }
}
EOF2
    $proxy{nginx} = { port => $pn, argv => [ '/usr/sbin/nginx', '-p', $dir, '-c', "$dir/nginx.conf" ] };
}
if (-x '/usr/sbin/haproxy') {
    spew("$dir/haproxy.cfg", <<"EOF2");
global
    log stderr local0 info
defaults
    mode http
    timeout connect 2s
    timeout client 5s
    timeout server 3s
    timeout http-request 2s
    option forwardfor
frontend fe
    bind 127.0.0.1:$ph
    acl h1 req.hdr(host),field(1,:) -i b1.lookout.test
    acl h2 req.hdr(host),field(1,:) -i b2.lookout.test
    use_backend b1 if h1
    use_backend b2 if h2
    http-request return status 421 if !h1 !h2
backend b1
    server s1 $b[0]{host}:$b[0]{port}
backend b2
    server s2 $b[1]{host}:$b[1]{port}
EOF2
    $proxy{haproxy} = { port => $ph, argv => [ '/usr/sbin/haproxy', '-db', '-f', "$dir/haproxy.cfg" ] };
}
die "neither nginx nor haproxy is installed\n" unless %proxy;

for my $name (sort keys %proxy) {
    my $p = $proxy{$name};
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$dir/$name.out"; open STDERR, '>&', \*STDOUT;
        exec @{ $p->{argv} } or POSIX::_exit(127);
    }
    $p->{pid} = $pid;
    wait_port('127.0.0.1', $p->{port}, 5) or die "$name did not start:\n" . (slurp("$dir/$name.out") // '');
}

# One line per outcome: "400 close", "200 open; b1: POST /a [length] body 5", ...
sub outcome {
    my ($res, $view) = @_;
    my $st = join(',', map { $_->{status} . ($_->{complete} ? '' : '?') } @{ $res->{responses} }) || 'none';
    my $how = $res->{how} =~ /^(?:eof|reset)$/ ? 'close' : $res->{how};
    my @r = map {
        my $h = join(' ', map { "$_->[0]=$_->[1]" } grep { $_->[0] =~ /^(?:host|content-length|transfer-encoding|x-forwarded-for)$/i } @{ $_->{headers} });
        "$_->{broker}: $_->{method} $_->{target} [$_->{framing}] body " . length($_->{body}) . ($h ? " ($h)" : '')
    } @{ $view->{reqs} };
    push @r, map { "$_->{broker} ERROR: $_->{error}" } @{ $view->{errors} };
    return "$st $how" . (@r ? '; ' . join('; ', @r) : '; nothing forwarded');
}

for my $shape (Smuggling::shapes()) {
    my ($name, $raw) = @$shape;
    next if defined $only && $name !~ /$only/;
    print "== $name\n";
    for my $pname (sort keys %proxy) {
        my $t = { name => 'plain', tls => 0, port => $proxy{$pname}{port}, scheme => 'http' };
        my $bytes = Smuggling::expand($raw, $t);
        my %marks = map { $_->name => $_->mark } @b;
        my $res = Smuggling::exchange($t, $bytes);
        Smuggling::settle_all(0.12, 2);
        my $view = Smuggling::broker_view(\%marks);
        printf "   %-8s %s\n", $pname, outcome($res, $view);
        my %messy = map { (split /#/)[0] => 1 } grep { $view->{pending}{$_} && !$view->{closed}{$_} } keys %{ $view->{pending} };
        $_->drop_all for grep { $messy{ $_->name } } @b;
    }
}

for my $p (values %proxy) { kill 'TERM', $p->{pid}; }
for my $p (values %proxy) {
    my $end = time + 3;
    sleep 0.05 while waitpid($p->{pid}, WNOHANG) == 0 && time < $end;
    if (waitpid($p->{pid}, WNOHANG) == 0) { kill 'KILL', $p->{pid}; waitpid($p->{pid}, 0) }
}
$_->stop for @b;
