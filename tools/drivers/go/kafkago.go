package main

// segmentio/kafka-go: one Reader per partition (no group) from FirstOffset and an async Writer with
// RequireAll. A control: kafka-go has no OffsetForLeaderEpoch API, and its Reader sends
// CurrentLeaderEpoch -1 (write.go, writeFetchRequestV10, v0.4.51: "-1 //FIXME"). On OFFSET_OUT_OF_RANGE
// the Reader asks for the first and last offsets and skips to the first one when below it, retries at
// once when the offset is back within the log, or waits when past its end (reader.go, v0.4.51 lines
// 1382-1409): it never re-reads, so a divergent tail it has read stays read.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func runKafkaGo(ctx context.Context, cfg config, out *emitter) error {
	logf := func(prefix string) kafka.LoggerFunc {
		l := log.New(os.Stderr, prefix, 0)
		return func(msg string, args ...interface{}) { l.Printf(msg, args...) }
	}
	dialer := &kafka.Dialer{ClientID: cfg.clientID, Timeout: 10 * time.Second}
	var partitions []kafka.Partition
	for { // the cluster may not answer yet, or not know the topic yet
		conn, err := dialer.DialContext(ctx, "tcp", cfg.bootstrap[0])
		if err == nil {
			partitions, err = conn.ReadPartitions(cfg.consumeTopic)
			conn.Close()
		}
		if err == nil && len(partitions) > 0 {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			out.surfaced("error", "metadata", err.Error())
		}
		time.Sleep(200 * time.Millisecond)
	}
	out.emit("start", map[string]any{"client": "kafka-go", "software": "kafka-go",
		"version": moduleVersion("github.com/segmentio/kafka-go"), "client_id": cfg.clientID, "reset": cfg.reset})

	isolation := kafka.ReadUncommitted
	if cfg.options["isolation.level"] == "read_committed" {
		isolation = kafka.ReadCommitted
	}
	var wg sync.WaitGroup
	if cfg.group != "" { // a member of a group (handoff-truncation): one reader, the group assigns
		reader := kafka.NewReader(kafka.ReaderConfig{
			Brokers: cfg.bootstrap, GroupID: cfg.group, Topic: cfg.consumeTopic, Dialer: dialer,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond, StartOffset: kafka.FirstOffset,
			Logger: logf("[kafka-go] "), ErrorLogger: logf("[kafka-go:error] "), IsolationLevel: isolation,
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			memberLoop(ctx, cfg, out, reader)
		}()
		partitions = nil
	}
	for _, p := range partitions {
		reader := kafka.NewReader(kafka.ReaderConfig{
			Brokers: cfg.bootstrap, Topic: cfg.consumeTopic, Partition: p.ID, Dialer: dialer,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond,
			Logger: logf("[kafka-go] "), ErrorLogger: logf("[kafka-go:error] "),
			IsolationLevel: isolation,
		})
		start := map[string]int64{"earliest": kafka.FirstOffset, "latest": kafka.LastOffset, "none": kafka.FirstOffset}
		if err := reader.SetOffset(start[cfg.reset]); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer reader.Close()
			for {
				m, err := reader.ReadMessage(ctx)
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, context.Canceled) {
						return
					}
					out.surfaced("error", "reader", fmt.Sprintf("partition %d: %v", reader.Config().Partition, err))
					continue
				}
				out.consumed(m.Topic, int32(m.Partition), m.Offset, nil, m.Value)
			}
		}()
	}
	writer := &kafka.Writer{
		Addr: kafka.TCP(cfg.bootstrap...), Topic: cfg.produceTopic, RequiredAcks: kafka.RequireAll,
		Async: true, BatchTimeout: 5 * time.Millisecond, Transport: &kafka.Transport{ClientID: cfg.clientID},
		ErrorLogger: logf("[kafka-go:writer:error] "), // its info lines are one per batch written
		Completion: func(messages []kafka.Message, err error) {
			for _, m := range messages {
				out.produced(m.Topic, int32(m.Partition), m.Offset, m.Value, err)
			}
		},
	}
	produceLoop(ctx, cfg, func(_ int, value []byte) {
		if err := writer.WriteMessages(context.Background(), kafka.Message{Value: value}); err != nil {
			out.produced(cfg.produceTopic, 0, 0, value, err)
		}
	})
	// Close flushes and waits for the Completion calls: bounded, as the other drivers' close, since an
	// async Writer with one request in flight per partition can hold seconds of records.
	within(5*time.Second, out, "producer close", func() {
		if err := writer.Close(); err != nil {
			out.surfaced("error", "producer", "close: "+err.Error())
		}
	})
	wg.Wait()
	return nil
}

// memberLoop reads as a group member until ctx ends, or with --leave-when-idle until it consumed something
// and nothing new came for that long: it then commits the last message it read and closes the reader,
// which leaves the group.
func memberLoop(ctx context.Context, cfg config, out *emitter, reader *kafka.Reader) {
	var last *kafka.Message
	lastAt := time.Time{}
	for ctx.Err() == nil {
		fetchCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		m, err := reader.FetchMessage(fetchCtx)
		cancel()
		if err == nil {
			out.consumed(m.Topic, int32(m.Partition), m.Offset, nil, m.Value)
			last, lastAt = &m, time.Now()
		} else if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			out.surfaced("error", "reader", err.Error())
		}
		if cfg.leaveIdle >= 0 && last != nil && time.Since(lastAt) >= cfg.leaveIdle {
			if err := reader.CommitMessages(ctx, *last); err != nil {
				out.surfaced("error", "commit", err.Error())
			}
			reader.Close()
			out.surfaced("log", "driver", "committed its position and left its group")
			<-ctx.Done()
			return
		}
	}
	reader.Close()
}
