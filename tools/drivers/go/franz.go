package main

// franz-go (github.com/twmb/franz-go/pkg/kgo): a direct consumer of every partition (ConsumeTopics, no
// group) and an acks=all producer on one client. franz-go implements KIP-320: after a leader change or
// FENCED_LEADER_EPOCH it asks OffsetForLeaderEpoch, resumes at the divergence point and reports a
// *kgo.ErrDataLoss as a fetch error (consumer.go, loadEpochsForBrokerLoad); --reset maps to
// ConsumeResetOffset for the OffsetOutOfRange cases it cannot locate.

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func runFranz(ctx context.Context, cfg config, out *emitter) error {
	reset := map[string]kgo.Offset{
		"earliest": kgo.NewOffset().AtStart(),
		"latest":   kgo.NewOffset().AtEnd(),
		"none":     kgo.NoResetOffset(),
	}[cfg.reset]
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.bootstrap...),
		kgo.ClientID(cfg.clientID),
		kgo.ConsumeTopics(cfg.consumeTopic),
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumeResetOffset(reset),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
	}
	if rack := cfg.options["rack"]; rack != "" { // KIP-392: fetch from a follower in this rack
		opts = append(opts, kgo.Rack(rack))
	}
	if cfg.options["isolation.level"] == "read_committed" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if cfg.group != "" { // a member of a group: the group assigns, commits are ours (handoff-truncation)
		opts = append(opts, kgo.ConsumerGroup(cfg.group), kgo.DisableAutoCommit())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	out.emit("start", map[string]any{"client": "franz-go", "software": "franz-go",
		"version": moduleVersion("github.com/twmb/franz-go"), "client_id": cfg.clientID, "reset": cfg.reset})

	go produceLoop(ctx, cfg, func(_ int, value []byte) {
		cl.Produce(context.Background(), &kgo.Record{Topic: cfg.produceTopic, Value: value}, func(r *kgo.Record, err error) {
			out.produced(r.Topic, r.Partition, r.Offset, value, err)
		})
	})
	var lastConsumed time.Time
	left := false
	for ctx.Err() == nil {
		if left {
			<-ctx.Done()
			break
		}
		pollCtx, cancelPoll := ctx, context.CancelFunc(func() {})
		if cfg.group != "" && cfg.leaveIdle >= 0 { // wake up to notice the idle bound
			pollCtx, cancelPoll = context.WithTimeout(ctx, 200*time.Millisecond)
		}
		fetches := cl.PollFetches(pollCtx)
		cancelPoll()
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			var loss *kgo.ErrDataLoss
			kind := "error"
			if errors.As(err, &loss) {
				kind = "truncation" // the client located the divergence (or reset) and says so
			}
			out.surfaced(kind, "fetch", "kgo."+errorName(err)+": "+err.Error())
		})
		fetches.EachRecord(func(r *kgo.Record) {
			epoch := r.LeaderEpoch
			out.consumed(r.Topic, r.Partition, r.Offset, &epoch, r.Value)
			lastConsumed = time.Now()
		})
		if cfg.group != "" && cfg.leaveIdle >= 0 && !lastConsumed.IsZero() && time.Since(lastConsumed) >= cfg.leaveIdle {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				out.surfaced("error", "commit", err.Error())
			}
			cl.LeaveGroup()
			left = true
			out.surfaced("log", "driver", "committed its position and left its group")
		}
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.Flush(flushCtx); err != nil {
		out.surfaced("error", "producer", "flush at exit: "+err.Error())
	}
	cl.Close()
	return nil
}

func errorName(err error) string {
	var loss *kgo.ErrDataLoss
	if errors.As(err, &loss) {
		return "ErrDataLoss"
	}
	return "FetchError"
}
