// The Go clients' wire driver: franz-go, IBM/sarama or segmentio/kafka-go (-client) consuming every
// partition of a topic from the beginning without a group and producing acks=all records, each event
// printed as one JSON line on stdout; the client's own log lines go to stderr. The Python side
// (python/epochguard/wire/drivers/go.py) turns both into the delivery log every driver writes, so
// digests and the classification of log lines live in one place.
//
// Flags mirror the Python drivers': --bootstrap, --client-id, --reset earliest|latest|none,
// --consume-topic, --produce-topic, --produce-interval-ms, --produce-count, --max-seconds.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config is what every driver takes on its command line (delivery_log.DriverConfig).
type config struct {
	client       string
	bootstrap    []string
	clientID     string
	reset        string
	consumeTopic string
	produceTopic string
	produceEvery time.Duration
	produceCount int
	maxDuration  time.Duration
	options      options       // --option KEY=VALUE; producer.KEY ones are the producer's
	group        string        // --group G: subscribe as a member of G (franz-go); "": assign every partition
	leaveIdle    time.Duration // --leave-when-idle S: commit and leave the group after S with nothing new (<0: never)
}

// emitter writes one JSON object a line to stdout, from any goroutine.
type emitter struct{ mu sync.Mutex }

func (e *emitter) emit(kind string, fields map[string]any) {
	fields["kind"] = kind
	line, err := json.Marshal(fields)
	if err != nil {
		line, _ = json.Marshal(map[string]any{"kind": "error", "source": "driver", "text": err.Error()})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func (e *emitter) consumed(topic string, partition int32, offset int64, epoch *int32, value []byte) {
	f := map[string]any{"topic": topic, "partition": partition, "offset": offset, "leader_epoch": nil,
		"value": hex.EncodeToString(value)}
	if epoch != nil && *epoch >= 0 {
		f["leader_epoch"] = *epoch
	}
	e.emit("consumed", f)
}

func (e *emitter) produced(topic string, partition int32, offset int64, value []byte, err error) {
	f := map[string]any{"topic": topic, "partition": partition, "offset": offset,
		"value": hex.EncodeToString(value), "error": nil}
	if err != nil {
		f["partition"], f["offset"], f["error"] = nil, nil, err.Error()
	}
	e.emit("produced", f)
}

func (e *emitter) surfaced(kind, source, text string) {
	e.emit(kind, map[string]any{"source": source, "text": text})
}

// schedule paces the produce loop as delivery_log.ProduceSchedule: one record every produceEvery,
// no burst after a stall, at most produceCount (0: no limit).
func produceLoop(ctx context.Context, cfg config, send func(seq int, value []byte)) {
	if cfg.produceEvery <= 0 {
		return
	}
	next := time.Now()
	for seq := 0; cfg.produceCount == 0 || seq < cfg.produceCount; seq++ {
		if wait := time.Until(next); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			return
		}
		now := time.Now()
		next = next.Add(cfg.produceEvery)
		if floor := now.Add(-cfg.produceEvery); next.Before(floor) {
			next = floor
		}
		send(seq, []byte(fmt.Sprintf("%s-%08d", cfg.clientID, seq)))
	}
	<-ctx.Done()
}

// within runs f, giving up on it after d (reported as an error: what it still held is not acknowledged).
func within(d time.Duration, out *emitter, what string, f func()) {
	done := make(chan struct{})
	go func() {
		f()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		out.surfaced("error", "driver", fmt.Sprintf("%s still running after %s; exiting without it", what, d))
	}
}

// moduleVersion is the version of a dependency this binary was built with, from its build info.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == path {
				return dep.Version
			}
		}
	}
	return "unknown"
}

type options map[string]string

func (o options) String() string { return fmt.Sprint(map[string]string(o)) }
func (o options) Set(kv string) error {
	k, v, _ := strings.Cut(kv, "=")
	o[k] = v
	return nil
}

func main() {
	var cfg config
	var bootstrap string
	var everyMs, maxSeconds float64
	opts := options{}
	flag.StringVar(&cfg.client, "client", "", "franz-go, sarama or kafka-go")
	flag.StringVar(&bootstrap, "bootstrap", "", "host:port[,host:port...]")
	flag.StringVar(&cfg.clientID, "client-id", "", "client id (default epochguard-<client>)")
	flag.StringVar(&cfg.reset, "reset", "earliest", "earliest, latest or none")
	flag.StringVar(&cfg.consumeTopic, "consume-topic", "events", "topic to consume")
	flag.StringVar(&cfg.produceTopic, "produce-topic", "input", "topic to produce to")
	flag.Float64Var(&everyMs, "produce-interval-ms", 20, "one acks=all record every this many ms (0: none)")
	flag.IntVar(&cfg.produceCount, "produce-count", 0, "stop producing after N records (0: no limit)")
	flag.Float64Var(&maxSeconds, "max-seconds", 600, "exit by itself after this long")
	var leaveIdleS float64
	flag.StringVar(&cfg.group, "group", "", "subscribe as a member of this group instead of assigning")
	flag.Float64Var(&leaveIdleS, "leave-when-idle", -1, "with --group: commit and leave after this many seconds with nothing new")
	flag.Var(opts, "option", "KEY=VALUE client setting (rack=R: franz-go's Rack, sarama's RackID; isolation.level=read_committed; sarama: producer.idempotent=true; others are ignored)")
	flag.Parse()
	if bootstrap == "" || (cfg.reset != "earliest" && cfg.reset != "latest" && cfg.reset != "none") {
		flag.Usage()
		os.Exit(2)
	}
	cfg.bootstrap = strings.Split(bootstrap, ",")
	cfg.options = opts
	if cfg.clientID == "" {
		cfg.clientID = "epochguard-" + cfg.client
	}
	cfg.produceEvery = time.Duration(everyMs * float64(time.Millisecond))
	cfg.maxDuration = time.Duration(maxSeconds * float64(time.Second))
	cfg.leaveIdle = time.Duration(leaveIdleS * float64(time.Second))

	ctx, cancel := context.WithTimeout(context.Background(), cfg.maxDuration)
	defer cancel()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		cancel()
	}()

	out := &emitter{}
	var err error
	switch cfg.client {
	case "franz-go":
		err = runFranz(ctx, cfg, out)
	case "sarama":
		err = runSarama(ctx, cfg, out)
	case "kafka-go":
		err = runKafkaGo(ctx, cfg, out)
	default:
		err = fmt.Errorf("unknown client %q: franz-go, sarama or kafka-go", cfg.client)
	}
	if err != nil {
		out.surfaced("error", "driver", err.Error())
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
