package cli

// The outside services the command line hands the engine, built from their flags and
// the environment: Consul (the health checks of Consul services and the drain), Prometheus
// (the metric gates) and the balancers whose evidence ends a drain.

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/balancer"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/gate/prometheus"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// consulFlags say where Consul's health API is, for the checks of Consul services. Empty
// values fall back to the CONSUL_* environment, as Consul's own CLI reads it.
type consulFlags struct {
	address, token, tlsServerName string
	tlsFiles
	skipVerify string // "", or a boolean
}

func (c *consulFlags) add(fs *flag.FlagSet) {
	addTextOptions(fs, c.texts())
	fs.Var(boolText{&c.skipVerify}, "consul-tls-skip-verify", "")
}

// texts are the -consul-* options given as text, with the CONSUL_* variables that stand
// in for them.
func (c *consulFlags) texts() []textOption {
	return append(c.tlsFiles.options("consul-", "CONSUL_"),
		textOption{"consul-address", "CONSUL_HTTP_ADDR", &c.address},
		textOption{"consul-token", "CONSUL_HTTP_TOKEN", &c.token},
		textOption{"consul-tls-server-name", "CONSUL_TLS_SERVER_NAME", &c.tlsServerName})
}

func (c consulFlags) validate() error { return c.tlsFiles.validate("consul-") }

// config is the Consul configuration: the flags, then the environment env gives (the
// process's, or a test's).
func (c consulFlags) config(env func(string) string) health.ConsulConfig {
	fillFromEnv(c.texts(), env)
	cfg := health.ConsulConfig{
		Address:       c.address,
		Token:         c.token,
		CACert:        c.caCert,
		ClientCert:    c.clientCert,
		ClientKey:     c.clientKey,
		TLSServerName: c.tlsServerName,
		Env:           consulEnv(env),
	}
	if c.skipVerify != "" {
		v, _ := strconv.ParseBool(c.skipVerify)
		cfg.SkipVerify = &v
	} else if v := strings.TrimSpace(env("CONSUL_HTTP_SSL_VERIFY")); v != "" {
		if verify, err := strconv.ParseBool(v); err == nil {
			skip := !verify
			cfg.SkipVerify = &skip
		}
	}
	if cfg.Address != "" && !strings.Contains(cfg.Address, "://") {
		if ssl, _ := strconv.ParseBool(strings.TrimSpace(env("CONSUL_HTTP_SSL"))); ssl {
			cfg.Address = "https://" + cfg.Address
		}
	}
	return cfg
}

// consulEnv is what consul/api's DefaultConfig reads from the environment, read from the
// one env gives: the Consul adapter (internal/health) reads no environment of its own.
func consulEnv(env func(string) string) health.ConsulEnv {
	return health.ConsulEnv{
		Address:       env("CONSUL_HTTP_ADDR"),
		Token:         env("CONSUL_HTTP_TOKEN"),
		TokenFile:     env("CONSUL_HTTP_TOKEN_FILE"),
		Auth:          env("CONSUL_HTTP_AUTH"),
		SSL:           env("CONSUL_HTTP_SSL"),
		TLSServerName: env("CONSUL_TLS_SERVER_NAME"),
		CACert:        env("CONSUL_CACERT"),
		CAPath:        env("CONSUL_CAPATH"),
		ClientCert:    env("CONSUL_CLIENT_CERT"),
		ClientKey:     env("CONSUL_CLIENT_KEY"),
		SSLVerify:     env("CONSUL_HTTP_SSL_VERIFY"),
		Namespace:     env("CONSUL_NAMESPACE"),
		Partition:     env("CONSUL_PARTITION"),
	}
}

// consulDialer is the engine's Consul on cfg: the flags over the environment, read by
// config.
func consulDialer(cfg health.ConsulConfig) engine.ConsulDialer {
	return health.ConsulDialer{Config: cfg}
}

// agentConsul is the agent's Consul, which has no -consul-* flags: the environment env
// gives, under the address each restart's planner recorded.
func agentConsul(env func(string) string, timeout time.Duration) engine.ConsulDialer {
	return consulDialer(health.ConsulConfig{Env: consulEnv(env), RequestTimeout: timeout})
}

// boolText is a boolean flag kept as text, so that "not given" differs from false.
type boolText struct{ v *string }

func (b boolText) String() string {
	if b.v == nil {
		return ""
	}
	return *b.v
}

func (b boolText) Set(s string) error {
	if _, err := strconv.ParseBool(s); err != nil {
		return err
	}
	*b.v = s
	return nil
}

func (b boolText) IsBoolFlag() bool { return true }

// prometheusFlags say where Prometheus is, for the metric gates. Empty values fall back to
// the NOMAD_RESTART_PROMETHEUS_* environment.
type prometheusFlags struct {
	address, tokenFile string
	tlsFiles
	skipVerify bool
}

func (p *prometheusFlags) add(fs *flag.FlagSet) {
	addTextOptions(fs, p.texts())
	fs.BoolVar(&p.skipVerify, "prometheus-tls-skip-verify", false, "")
}

// texts are the -prometheus-* options given as text, with the NOMAD_RESTART_PROMETHEUS_*
// variables that stand in for them.
func (p *prometheusFlags) texts() []textOption {
	return append(p.tlsFiles.options("prometheus-", "NOMAD_RESTART_PROMETHEUS_"),
		textOption{"prometheus-address", "NOMAD_RESTART_PROMETHEUS_ADDR", &p.address},
		textOption{"prometheus-token-file", "NOMAD_RESTART_PROMETHEUS_TOKEN_FILE", &p.tokenFile})
}

func (p prometheusFlags) validate() error { return p.tlsFiles.validate("prometheus-") }

// config is the Prometheus configuration: the flags, then the environment env gives. A
// bearer token is read from NOMAD_RESTART_PROMETHEUS_TOKEN, or a file, never a flag (a
// flag's value shows in the process list).
func (p prometheusFlags) config(env func(string) string) prometheus.Config {
	fillFromEnv(p.texts(), env)
	cfg := prometheus.Config{
		Address:            p.address,
		BearerTokenFile:    p.tokenFile,
		CACert:             p.caCert,
		ClientCert:         p.clientCert,
		ClientKey:          p.clientKey,
		InsecureSkipVerify: p.skipVerify,
	}
	if cfg.BearerTokenFile == "" {
		cfg.BearerToken = strings.TrimSpace(env("NOMAD_RESTART_PROMETHEUS_TOKEN"))
	}
	return cfg
}

// gatesConfig hands the engine Prometheus as cfg (the flags over the environment) says.
func gatesConfig(cfg prometheus.Config) engine.GatesConfig {
	return engine.GatesConfig{Prometheus: prometheus.Dialer{Config: cfg}}
}

// gateFlags are -gate and the options of how gates measure, as typed.
type gateFlags struct {
	gates                           stringsFlag
	delay, interval, noData         string
	count, failureLimit, errorLimit string
	dryRun                          bool
}

func (g *gateFlags) add(fs *flag.FlagSet) {
	d := gate.DefaultPolicy()
	fs.Var(&g.gates, "gate", "")
	fs.StringVar(&g.delay, "gate-delay", d.Delay.String(), "")
	fs.StringVar(&g.interval, "gate-interval", d.Interval.String(), "")
	fs.StringVar(&g.count, "gate-count", strconv.Itoa(d.Count), "")
	fs.StringVar(&g.failureLimit, "gate-failure-limit", strconv.Itoa(d.FailureLimit), "")
	fs.StringVar(&g.errorLimit, "gate-error-limit", strconv.Itoa(d.ErrorLimit), "")
	fs.StringVar(&g.noData, "gate-no-data", d.NoData.String(), "")
	fs.BoolVar(&g.dryRun, "gate-dry-run", false, "")
}

// describeGatePolicy is how gates measure, as status shows it: "3x10s,delay=0s,failure-limit=0,...".
func describeGatePolicy(p gate.Policy) string {
	s := fmt.Sprintf("count=%d,interval=%s", p.Count, p.Interval)
	if p.Delay > 0 {
		s += ",delay=" + p.Delay.String()
	}
	s += fmt.Sprintf(",failure-limit=%d,error-limit=%d,no-data=%s", p.FailureLimit, p.ErrorLimit, p.NoData)
	if p.DryRun {
		s += ",dry-run"
	}
	return s
}

// printGateValues shows what each gate's query gives now (run -dry-run). A gate that
// fails now does not fail the dry run: it measures the service before the restart.
func printGateValues(p *output.Printer, ms []gate.Measurement, policy gate.Policy, asJSON bool) {
	if len(ms) == 0 {
		return
	}
	if asJSON {
		for _, m := range ms {
			p.JSONLine(m)
		}
		return
	}
	p.Plain("\nGates after each batch, as the 1st batch's would measure now:")
	for _, m := range ms {
		now := ""
		switch m.Verdict {
		case gate.VerdictError:
			now = "query failed: " + output.OneLine(m.Error)
		case gate.VerdictNoData:
			now = "no data, " + string(gate.VerdictFail)
			if policy.NoData == gate.NoDataPass {
				now = "no data, " + string(gate.VerdictPass)
			}
		default:
			now = fmt.Sprintf("%s, %s", gate.FormatValue(m.Value), m.Verdict)
		}
		p.Plain(fmt.Sprintf("    %s: %s\n        now: %s", m.Gate, m.Query, now))
	}
}

// gatesAnswered refuses to start a restart whose gates' queries fail now: they would fail
// after the first batch restarted.
func gatesAnswered(ms []gate.Measurement) error {
	for _, m := range ms {
		if m.Verdict == gate.VerdictError {
			return fmt.Errorf("gate %q: its query failed: %s; fix the query or Prometheus, then run again (nothing was restarted)", m.Gate, output.OneLine(m.Error))
		}
	}
	return nil
}

// printGateRuns shows, per batch, how its metric gates ended and what they measured.
func printGateRuns(w io.Writer, runs []restart.GateRun) {
	_ = output.WriteSection(w, "Gates", runs, "Batch\tOutcome\tMeasurements\tReason", func(g restart.GateRun) string {
		ms := make([]string, 0, len(g.Measurements))
		for _, m := range g.Measurements {
			ms = append(ms, describeGateMeasurement(m))
		}
		return fmt.Sprintf("%d\t%s\t%s\t%s", g.Batch, g.Outcome, output.OrDash(strings.Join(ms, ", ")), output.OrDash(output.OneLine(g.Reason)))
	})
}

// describeGateMeasurement is one measurement in a table cell: "errors=0.013 pass".
func describeGateMeasurement(m gate.Measurement) string {
	switch m.Verdict {
	case gate.VerdictError:
		return m.Gate + " error"
	case gate.VerdictNoData:
		return m.Gate + " no-data"
	}
	return fmt.Sprintf("%s=%s %s", m.Gate, gate.FormatValue(m.Value), m.Verdict)
}

// balancerDialer hands the engine the drain's probes of load balancers (-drain-until).
type balancerDialer struct{ d balancer.Dialer }

func (b balancerDialer) Dial(ev restart.DrainEvidence) (engine.BalancerProbe, error) {
	return b.d.Dial(ev)
}

// balancersConfig is how the engine reads load balancers: within the request timeout, and
// Prometheus as the gates reach it. until and refresh are the agent's defaults for the
// restarts it plans (nil for the command line, whose restarts give their own).
func balancersConfig(prom prometheus.Config, timeout time.Duration, until []restart.DrainEvidence, refresh map[string]time.Duration) engine.BalancersConfig {
	return engine.BalancersConfig{Dialer: balancerDialer{balancer.Dialer{Timeout: timeout, Prometheus: prometheus.Dialer{Config: prom}}},
		DrainUntil: until, Refresh: refresh}
}

// agentBalancerDefaults parses the agent's -drain-until and -balancer-refresh, once, with
// the restarts' own parsers.
func agentBalancerDefaults(until, refresh []string) ([]restart.DrainEvidence, map[string]time.Duration, error) {
	var evs []restart.DrainEvidence
	for _, v := range until {
		ev, err := restart.ParseDrainUntil(v)
		if err != nil {
			return nil, nil, usageErrorf("%s", capitalInvalid(err))
		}
		evs = append(evs, ev)
	}
	var m map[string]time.Duration
	for _, v := range refresh {
		k, d, err := restart.ParseBalancerRefresh(v)
		if err != nil {
			return nil, nil, usageErrorf("%s", capitalInvalid(err))
		}
		if m == nil {
			m = map[string]time.Duration{}
		}
		m[k] = d
	}
	return evs, m, nil
}
