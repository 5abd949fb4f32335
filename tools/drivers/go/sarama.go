package main

// IBM/sarama: one PartitionConsumer per partition from OffsetOldest and an AsyncProducer with
// WaitForAll, on one client at sarama's default protocol version (V2_8_0_0). A control: sarama has no
// OffsetForLeaderEpoch request, so it cannot locate a divergence. Its Fetch (v12 at 2.8) carries the
// metadata's current leader epoch, and FENCED_LEADER_EPOCH/UNKNOWN_LEADER_EPOCH only redispatch the
// partition (consumer.go, handleResponses, v1.61.1 lines 1276-1286); OFFSET_OUT_OF_RANGE shuts the
// PartitionConsumer down "to force the user to choose what to do" (lines 1268-1275). This driver is that
// user: under --reset earliest/latest it restarts the partition at OffsetOldest/OffsetNewest, as
// auto.offset.reset would; under none the partition stays stopped.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

func runSarama(ctx context.Context, cfg config, out *emitter) error {
	sarama.Logger = log.New(os.Stderr, "[sarama] ", 0)
	sc := sarama.NewConfig()
	sc.ClientID = cfg.clientID
	sc.Consumer.Return.Errors = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
	if cfg.options["producer.idempotent"] == "true" { // sarama's rules: one request in flight, acks=all
		sc.Producer.Idempotent = true
		sc.Net.MaxOpenRequests = 1
	}
	if rack := cfg.options["rack"]; rack != "" { // KIP-392: Fetch v11+, which sarama sends from Kafka 2.3 on
		sc.RackID = rack
		if !sc.Version.IsAtLeast(sarama.V2_3_0_0) {
			sc.Version = sarama.V2_3_0_0
		}
	}
	if cfg.options["isolation.level"] == "read_committed" { // Fetch v4+ (Kafka 0.11), sarama's default version
		sc.Consumer.IsolationLevel = sarama.ReadCommitted
		if !sc.Version.IsAtLeast(sarama.V0_11_0_0) {
			sc.Version = sarama.V0_11_0_0
		}
	}
	if cfg.group != "" {
		sc.Consumer.Offsets.AutoCommit.Enable = false // commits are the driver's: on leaving only
		sc.Consumer.Offsets.Initial = sarama.OffsetOldest
		if !sc.Version.IsAtLeast(sarama.V0_10_2_0) {
			sc.Version = sarama.V0_10_2_0
		}
	}
	var client sarama.Client
	var partitions []int32
	for { // the cluster may not answer yet, or not know the topic yet
		var err error
		if client == nil {
			client, err = sarama.NewClient(cfg.bootstrap, sc)
		}
		if err == nil {
			partitions, err = client.Partitions(cfg.consumeTopic)
		}
		if err == nil && len(partitions) > 0 {
			break
		}
		if err != nil {
			out.surfaced("error", "metadata", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer client.Close()
	out.emit("start", map[string]any{"client": "sarama", "software": "sarama",
		"version": moduleVersion("github.com/IBM/sarama"), "client_id": cfg.clientID, "reset": cfg.reset,
		"protocol_version": sc.Version.String()})

	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	producer, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	if cfg.group != "" { // a member of a group (handoff-truncation): the group assigns, commits are ours
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := saramaMember(ctx, cfg, out, client); err != nil {
				out.surfaced("error", "group", err.Error())
			}
		}()
		partitions = nil
	}
	for _, p := range partitions {
		wg.Add(1)
		go func(p int32) {
			defer wg.Done()
			consumeSaramaPartition(ctx, cfg, out, consumer, p)
		}(p)
	}
	wg.Add(1)
	go func() { // acks and failures, in whatever order they come back
		defer wg.Done()
		successes, failures := producer.Successes(), producer.Errors()
		for successes != nil || failures != nil {
			select {
			case m, ok := <-successes:
				if !ok {
					successes = nil
					continue
				}
				value, _ := m.Value.Encode()
				out.produced(m.Topic, m.Partition, m.Offset, value, nil)
			case e, ok := <-failures:
				if !ok {
					failures = nil
					continue
				}
				value, _ := e.Msg.Value.Encode()
				out.produced(e.Msg.Topic, 0, 0, value, e.Err)
			}
		}
	}()
	produceLoop(ctx, cfg, func(_ int, value []byte) {
		select {
		case producer.Input() <- &sarama.ProducerMessage{Topic: cfg.produceTopic, Value: sarama.ByteEncoder(value)}:
		case <-ctx.Done():
		}
	})
	producer.AsyncClose() // flushes what it holds; closes Successes/Errors when done
	within(5*time.Second, out, "producer and consumer close", func() {
		wg.Wait()
		consumer.Close()
	})
	return nil
}

func consumeSaramaPartition(ctx context.Context, cfg config, out *emitter, consumer sarama.Consumer, p int32) {
	offset := sarama.OffsetOldest
	for ctx.Err() == nil {
		pc, err := consumer.ConsumePartition(cfg.consumeTopic, p, offset)
		if err != nil { // e.g. the previous PartitionConsumer of p is still closing
			out.surfaced("error", "consumer", fmt.Sprintf("ConsumePartition %s/%d: %v", cfg.consumeTopic, p, err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		outOfRange, stopping := false, ctx.Done()
		messages, failures := pc.Messages(), pc.Errors()
		for messages != nil || failures != nil {
			select {
			case <-stopping:
				pc.AsyncClose()
				stopping = nil // drain until sarama closes both channels
			case m, ok := <-messages:
				if !ok {
					messages = nil
					continue
				}
				out.consumed(m.Topic, m.Partition, m.Offset, nil, m.Value)
			case e, ok := <-failures:
				if !ok {
					failures = nil
					continue
				}
				if errors.Is(e.Err, sarama.ErrOffsetOutOfRange) {
					outOfRange = true
					out.surfaced("reset", "consumer", fmt.Sprintf("%s/%d: %v (the partition consumer shut down)",
						e.Topic, e.Partition, e.Err))
				} else {
					out.surfaced("error", "consumer", e.Error())
				}
			}
		}
		if !outOfRange || cfg.reset == "none" {
			return
		}
		offset = map[string]int64{"earliest": sarama.OffsetOldest, "latest": sarama.OffsetNewest}[cfg.reset]
	}
}

// saramaHandler consumes every claim, marking each message; the last session is kept for the commit.
type saramaHandler struct {
	out     *emitter
	mu      sync.Mutex
	session sarama.ConsumerGroupSession
	last    time.Time // when it last consumed a record (zero: never)
}

func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.session = s
	return nil
}

func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.out.consumed(m.Topic, m.Partition, m.Offset, nil, m.Value)
			s.MarkMessage(m, "")
			h.mu.Lock()
			h.last = time.Now()
			h.mu.Unlock()
		case <-s.Context().Done():
			return nil
		}
	}
}

// saramaMember consumes as a member of --group until ctx ends, or with --leave-when-idle until it consumed
// something and nothing new came for that long: it then commits what it marked and closes the group,
// which leaves it.
func saramaMember(ctx context.Context, cfg config, out *emitter, client sarama.Client) error {
	group, err := sarama.NewConsumerGroupFromClient(cfg.group, client)
	if err != nil {
		return err
	}
	h := &saramaHandler{out: out}
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for consumeCtx.Err() == nil {
			if err := group.Consume(consumeCtx, []string{cfg.consumeTopic}, h); err != nil && consumeCtx.Err() == nil {
				out.surfaced("error", "group", err.Error())
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			stopConsuming()
			<-done
			return group.Close()
		case <-ticker.C:
		}
		h.mu.Lock()
		due := cfg.leaveIdle >= 0 && !h.last.IsZero() && time.Since(h.last) >= cfg.leaveIdle
		session := h.session
		h.mu.Unlock()
		if due && session != nil {
			session.Commit()
			stopConsuming()
			<-done
			err := group.Close()
			out.surfaced("log", "driver", "committed its position and left its group")
			<-ctx.Done()
			return err
		}
	}
}
