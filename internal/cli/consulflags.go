package cli

import (
	"flag"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/health"
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
