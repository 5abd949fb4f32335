//! The client's half of the codec for Python: `epochguard.messages` requests -> frames, response
//! frames -> `epochguard.messages` responses (what `epochguard.client` sends and reads). The mirror of
//! the server's half in the parent module, with its helpers; same flattened message shapes.
//!
//! A field is written only from the version that has it (the crate refuses a non-default value in a
//! version without the field), so one request object serves every version the broker may pick.

use kafka_protocol::messages::{self as km, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::{
    by_topic, get, get_bytes, get_opt_str, get_str, items, messages, tuple, PyRequestHeader,
};
use crate::wire::{self, client as codec};

/// Encode a request frame, size prefix included, at the header's version.
#[pyfunction]
fn encode_request<'py>(
    py: Python<'py>,
    header: &PyRequestHeader,
    request: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let header = header.0.clone();
    if wire::client_supported(header.api_key, header.api_version).is_none() {
        return Err(super::unsupported_version(py, header));
    }
    let body = request_kind(request, header.api_key, header.api_version)?;
    let frame = py.detach(|| codec::encode_request(&header, &body))?;
    Ok(PyBytes::new(py, &frame))
}

/// Decode a response frame (after its size prefix) to a request sent at `api_key`/`api_version`:
/// `(correlation_id, response)`.
#[pyfunction]
fn decode_response<'py>(
    py: Python<'py>,
    api_key: i16,
    api_version: i16,
    frame: &Bound<'py, PyAny>,
) -> PyResult<(i32, Bound<'py, PyAny>)> {
    let frame = super::frame_bytes(frame)?;
    let (correlation_id, body) =
        py.detach(|| codec::decode_response(api_key, api_version, frame))?;
    Ok((correlation_id, response_object(py, &body, api_version)?))
}

// --- requests: messages dataclasses -> crate types ----------------------------------------------

fn request_kind(r: &Bound<'_, PyAny>, api_key: i16, v: i16) -> PyResult<RequestKind> {
    let key = km::ApiKey::try_from(api_key)
        .map_err(|()| PyValueError::new_err(format!("unknown api key {api_key}")))?;
    Ok(match key {
        km::ApiKey::ApiVersions => {
            let mut m = km::ApiVersionsRequest::default();
            if v >= 3 {
                m.client_software_name = get_str(r, "client_software_name")?;
                m.client_software_version = get_str(r, "client_software_version")?;
            }
            RequestKind::ApiVersions(m)
        }
        km::ApiKey::Metadata => {
            let mut m = km::MetadataRequest::default();
            let topics: Option<Vec<PyBackedStr>> = get(r, "topics")?;
            m.topics = match topics {
                // v0 has no null: an empty list asks for every topic.
                None if v == 0 => Some(Vec::new()),
                None => None,
                Some(names) => Some(
                    names
                        .into_iter()
                        .map(|n| {
                            let mut t = km::metadata_request::MetadataRequestTopic::default();
                            t.name = Some(str_bytes(&n).into());
                            t
                        })
                        .collect(),
                ),
            };
            if v >= 4 {
                m.allow_auto_topic_creation = get(r, "allow_auto_topic_creation")?;
            }
            RequestKind::Metadata(m)
        }
        km::ApiKey::Fetch => {
            let mut m = km::FetchRequest::default();
            m.replica_id = km::BrokerId(get(r, "replica_id")?);
            m.max_wait_ms = get(r, "max_wait_ms")?;
            m.min_bytes = get(r, "min_bytes")?;
            m.max_bytes = get(r, "max_bytes")?;
            m.isolation_level = get(r, "isolation_level")?;
            if v >= 7 {
                m.session_id = get(r, "session_id")?;
                m.session_epoch = get(r, "session_epoch")?;
                let mut forgotten: Vec<(StrBytes, Vec<i32>)> = Vec::new();
                for tp in items(r, "forgotten_topics")? {
                    let topic = get_str(&tp, "topic")?;
                    let partition: i32 = get(&tp, "partition")?;
                    match forgotten.iter_mut().find(|(t, _)| *t == topic) {
                        Some((_, ps)) => ps.push(partition),
                        None => forgotten.push((topic, vec![partition])),
                    }
                }
                for (topic, partitions) in forgotten {
                    let mut t = km::fetch_request::ForgottenTopic::default();
                    t.topic = topic.into();
                    t.partitions = partitions;
                    m.forgotten_topics_data.push(t);
                }
            }
            if v >= 11 {
                m.rack_id = get_str(r, "rack_id")?;
            }
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::fetch_request::FetchPartition::default();
                out.partition = get(p, "partition_index")?;
                out.fetch_offset = get(p, "fetch_offset")?;
                out.partition_max_bytes = get(p, "partition_max_bytes")?;
                if v >= 5 {
                    out.log_start_offset = get(p, "log_start_offset")?;
                }
                if v >= 9 {
                    out.current_leader_epoch = get(p, "current_leader_epoch")?;
                }
                if v >= 12 {
                    out.last_fetched_epoch = get(p, "last_fetched_epoch")?;
                }
                Ok(out)
            })? {
                let mut t = km::fetch_request::FetchTopic::default();
                t.topic = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            RequestKind::Fetch(m)
        }
        km::ApiKey::ListOffsets => {
            let mut m = km::ListOffsetsRequest::default();
            m.replica_id = km::BrokerId(get(r, "replica_id")?);
            if v >= 2 {
                m.isolation_level = get(r, "isolation_level")?;
            }
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::list_offsets_request::ListOffsetsPartition::default();
                out.partition_index = get(p, "partition_index")?;
                out.timestamp = get(p, "timestamp")?;
                if v >= 4 {
                    out.current_leader_epoch = get(p, "current_leader_epoch")?;
                }
                Ok(out)
            })? {
                let mut t = km::list_offsets_request::ListOffsetsTopic::default();
                t.name = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            RequestKind::ListOffsets(m)
        }
        km::ApiKey::OffsetForLeaderEpoch => {
            let mut m = km::OffsetForLeaderEpochRequest::default();
            if v >= 3 {
                m.replica_id = km::BrokerId(get(r, "replica_id")?);
            }
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out =
                    km::offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
                out.partition = get(p, "partition_index")?;
                out.leader_epoch = get(p, "leader_epoch")?;
                out.current_leader_epoch = get(p, "current_leader_epoch")?;
                Ok(out)
            })? {
                let mut t = km::offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
                t.topic = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            RequestKind::OffsetForLeaderEpoch(m)
        }
        km::ApiKey::OffsetCommit => {
            let mut m = km::OffsetCommitRequest::default();
            m.group_id = get_str(r, "group_id")?.into();
            m.generation_id_or_member_epoch = get(r, "generation_id_or_member_epoch")?;
            m.member_id = get_str(r, "member_id")?;
            if v >= 7 {
                m.group_instance_id = get_opt_str(r, "group_instance_id")?;
            }
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::offset_commit_request::OffsetCommitRequestPartition::default();
                out.partition_index = get(p, "partition_index")?;
                out.committed_offset = get(p, "committed_offset")?;
                if v >= 6 {
                    out.committed_leader_epoch = get(p, "committed_leader_epoch")?;
                }
                out.committed_metadata = Some(get_str(p, "committed_metadata")?);
                Ok(out)
            })? {
                let mut t = km::offset_commit_request::OffsetCommitRequestTopic::default();
                t.name = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            RequestKind::OffsetCommit(m)
        }
        km::ApiKey::OffsetFetch => {
            let mut m = km::OffsetFetchRequest::default();
            let group_id = get_str(r, "group_id")?;
            let partitions = r.getattr(intern!(r.py(), "partitions"))?;
            let mut topics: Option<Vec<(StrBytes, Vec<i32>)>> = None;
            if !partitions.is_none() {
                let mut list: Vec<(StrBytes, Vec<i32>)> = Vec::new();
                for tp in partitions.try_iter()? {
                    let tp = tp?;
                    let topic = get_str(&tp, "topic")?;
                    let partition: i32 = get(&tp, "partition")?;
                    match list.iter_mut().find(|(t, _)| *t == topic) {
                        Some((_, ps)) => ps.push(partition),
                        None => list.push((topic, vec![partition])),
                    }
                }
                topics = Some(list);
            } else if v < 2 {
                return Err(PyValueError::new_err(format!(
                    "OffsetFetch v{v} cannot ask for every partition (null topics from v2)"
                )));
            }
            if v >= 7 {
                m.require_stable = get(r, "require_stable")?;
            }
            if v >= 8 {
                let mut g = km::offset_fetch_request::OffsetFetchRequestGroup::default();
                g.group_id = group_id.into();
                g.topics = topics.map(|ts| {
                    ts.into_iter()
                        .map(|(name, ps)| {
                            let mut t =
                                km::offset_fetch_request::OffsetFetchRequestTopics::default();
                            t.name = name.into();
                            t.partition_indexes = ps;
                            t
                        })
                        .collect()
                });
                m.groups.push(g);
            } else {
                m.group_id = group_id.into();
                m.topics = topics.map(|ts| {
                    ts.into_iter()
                        .map(|(name, ps)| {
                            let mut t =
                                km::offset_fetch_request::OffsetFetchRequestTopic::default();
                            t.name = name.into();
                            t.partition_indexes = ps;
                            t
                        })
                        .collect()
                });
            }
            RequestKind::OffsetFetch(m)
        }
        km::ApiKey::FindCoordinator => {
            let mut m = km::FindCoordinatorRequest::default();
            if v >= 1 {
                m.key_type = get(r, "key_type")?;
            }
            let keys: Vec<PyBackedStr> = get(r, "coordinator_keys")?;
            let key = get_str(r, "key")?;
            if v >= 4 {
                m.coordinator_keys = if keys.is_empty() {
                    vec![key]
                } else {
                    keys.iter().map(str_bytes).collect()
                };
            } else {
                m.key = match keys.as_slice() {
                    [only] if key.is_empty() || key.as_str() == &**only => str_bytes(only),
                    [] => key,
                    _ => {
                        return Err(PyValueError::new_err(format!(
                            "FindCoordinator v{v} asks for one key, got {}",
                            keys.len()
                        )))
                    }
                };
            }
            RequestKind::FindCoordinator(m)
        }
        km::ApiKey::Produce => {
            let mut m = km::ProduceRequest::default();
            m.acks = get(r, "acks")?;
            m.timeout_ms = get(r, "timeout_ms")?;
            m.transactional_id = get_opt_str(r, "transactional_id")?.map(Into::into);
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::produce_request::PartitionProduceData::default();
                out.index = get(p, "partition_index")?;
                // A client sends encoded v2 batches (record tuples are the simulator's shortcut).
                out.records = Some(get_bytes(p, "records")?);
                Ok(out)
            })? {
                let mut t = km::produce_request::TopicProduceData::default();
                t.name = name.into();
                t.partition_data = parts;
                m.topic_data.push(t);
            }
            RequestKind::Produce(m)
        }
        km::ApiKey::InitProducerId => {
            let mut m = km::InitProducerIdRequest::default();
            m.transactional_id = get_opt_str(r, "transactional_id")?.map(Into::into);
            m.transaction_timeout_ms = get(r, "transaction_timeout_ms")?;
            if v >= 3 {
                m.producer_id = km::ProducerId(get(r, "producer_id")?);
                m.producer_epoch = get(r, "producer_epoch")?;
            }
            RequestKind::InitProducerId(m)
        }
        km::ApiKey::AddPartitionsToTxn => {
            // v0-3, the client's form (v4+ batch transactions, broker to coordinator only).
            let mut m = km::AddPartitionsToTxnRequest::default();
            m.v3_and_below_transactional_id = get_str(r, "transactional_id")?.into();
            m.v3_and_below_producer_id = km::ProducerId(get(r, "producer_id")?);
            m.v3_and_below_producer_epoch = get(r, "producer_epoch")?;
            for (name, parts) in by_topic(items(r, "partitions")?, |p| get::<i32>(p, "partition"))?
            {
                let mut t = km::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                t.name = name.into();
                t.partitions = parts;
                m.v3_and_below_topics.push(t);
            }
            RequestKind::AddPartitionsToTxn(m)
        }
        km::ApiKey::AddOffsetsToTxn => {
            let mut m = km::AddOffsetsToTxnRequest::default();
            m.transactional_id = get_str(r, "transactional_id")?.into();
            m.producer_id = km::ProducerId(get(r, "producer_id")?);
            m.producer_epoch = get(r, "producer_epoch")?;
            m.group_id = get_str(r, "group_id")?.into();
            RequestKind::AddOffsetsToTxn(m)
        }
        km::ApiKey::TxnOffsetCommit => {
            let mut m = km::TxnOffsetCommitRequest::default();
            m.transactional_id = get_str(r, "transactional_id")?.into();
            m.group_id = get_str(r, "group_id")?.into();
            m.producer_id = km::ProducerId(get(r, "producer_id")?);
            m.producer_epoch = get(r, "producer_epoch")?;
            if v >= 3 {
                m.generation_id = get(r, "generation_id")?;
                m.member_id = get_str(r, "member_id")?;
                m.group_instance_id = get_opt_str(r, "group_instance_id")?;
            }
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out =
                    km::txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
                out.partition_index = get(p, "partition_index")?;
                out.committed_offset = get(p, "committed_offset")?;
                if v >= 2 {
                    out.committed_leader_epoch = get(p, "committed_leader_epoch")?;
                }
                out.committed_metadata = Some(get_str(p, "committed_metadata")?);
                Ok(out)
            })? {
                let mut t = km::txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                t.name = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            RequestKind::TxnOffsetCommit(m)
        }
        km::ApiKey::EndTxn => {
            let mut m = km::EndTxnRequest::default();
            m.transactional_id = get_str(r, "transactional_id")?.into();
            m.producer_id = km::ProducerId(get(r, "producer_id")?);
            m.producer_epoch = get(r, "producer_epoch")?;
            m.committed = get(r, "committed")?;
            RequestKind::EndTxn(m)
        }
        km::ApiKey::ListGroups => {
            let mut m = km::ListGroupsRequest::default();
            if v >= 4 {
                let states: Vec<PyBackedStr> = get(r, "states_filter")?;
                m.states_filter = states.iter().map(str_bytes).collect();
            }
            if v >= 5 {
                let types: Vec<PyBackedStr> = get(r, "types_filter")?;
                m.types_filter = types.iter().map(str_bytes).collect();
            }
            RequestKind::ListGroups(m)
        }
        km::ApiKey::DescribeGroups => {
            let mut m = km::DescribeGroupsRequest::default();
            let groups: Vec<PyBackedStr> = get(r, "groups")?;
            m.groups = groups.iter().map(|g| str_bytes(g).into()).collect();
            RequestKind::DescribeGroups(m)
        }
        km::ApiKey::DescribeProducers => {
            let mut m = km::DescribeProducersRequest::default();
            for (name, parts) in by_topic(items(r, "partitions")?, |p| get::<i32>(p, "partition"))?
            {
                let mut t = km::describe_producers_request::TopicRequest::default();
                t.name = name.into();
                t.partition_indexes = parts;
                m.topics.push(t);
            }
            RequestKind::DescribeProducers(m)
        }
        km::ApiKey::JoinGroup => {
            let mut m = km::JoinGroupRequest::default();
            m.group_id = get_str(r, "group_id")?.into();
            m.session_timeout_ms = get(r, "session_timeout_ms")?;
            if v >= 1 {
                m.rebalance_timeout_ms = get(r, "rebalance_timeout_ms")?;
            }
            m.member_id = get_str(r, "member_id")?;
            if v >= 5 {
                m.group_instance_id = get_opt_str(r, "group_instance_id")?;
            }
            m.protocol_type = get_str(r, "protocol_type")?;
            for p in items(r, "protocols")? {
                let mut out = km::join_group_request::JoinGroupRequestProtocol::default();
                out.name = get_str(&p, "name")?;
                out.metadata = get_bytes(&p, "metadata")?;
                m.protocols.push(out);
            }
            RequestKind::JoinGroup(m)
        }
        km::ApiKey::SyncGroup => {
            let mut m = km::SyncGroupRequest::default();
            m.group_id = get_str(r, "group_id")?.into();
            m.generation_id = get(r, "generation_id")?;
            m.member_id = get_str(r, "member_id")?;
            if v >= 3 {
                m.group_instance_id = get_opt_str(r, "group_instance_id")?;
            }
            if v >= 5 {
                m.protocol_type = get_opt_str(r, "protocol_type")?;
                m.protocol_name = get_opt_str(r, "protocol_name")?;
            }
            for a in items(r, "assignments")? {
                let mut out = km::sync_group_request::SyncGroupRequestAssignment::default();
                out.member_id = get_str(&a, "member_id")?;
                out.assignment = get_bytes(&a, "assignment")?;
                m.assignments.push(out);
            }
            RequestKind::SyncGroup(m)
        }
        km::ApiKey::SaslHandshake => {
            let mut m = km::SaslHandshakeRequest::default();
            m.mechanism = get_str(r, "mechanism")?;
            RequestKind::SaslHandshake(m)
        }
        km::ApiKey::SaslAuthenticate => {
            let mut m = km::SaslAuthenticateRequest::default();
            m.auth_bytes = get_bytes(r, "auth_bytes")?;
            RequestKind::SaslAuthenticate(m)
        }
        km::ApiKey::Heartbeat => {
            let mut m = km::HeartbeatRequest::default();
            m.group_id = get_str(r, "group_id")?.into();
            m.generation_id = get(r, "generation_id")?;
            m.member_id = get_str(r, "member_id")?;
            if v >= 3 {
                m.group_instance_id = get_opt_str(r, "group_instance_id")?;
            }
            RequestKind::Heartbeat(m)
        }
        km::ApiKey::LeaveGroup => {
            let mut m = km::LeaveGroupRequest::default();
            m.group_id = get_str(r, "group_id")?.into();
            let members = items(r, "members")?;
            if v >= 3 {
                for member in &members {
                    let mut out = km::leave_group_request::MemberIdentity::default();
                    out.member_id = get_str(member, "member_id")?;
                    out.group_instance_id = get_opt_str(member, "group_instance_id")?;
                    if v >= 5 {
                        out.reason = get_opt_str(member, "reason")?;
                    }
                    m.members.push(out);
                }
            } else {
                let [member] = members.as_slice() else {
                    return Err(PyValueError::new_err(format!(
                        "LeaveGroup v{v} leaves one member, got {}",
                        members.len()
                    )));
                };
                m.member_id = get_str(member, "member_id")?;
            }
            RequestKind::LeaveGroup(m)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "no request encoding for {other:?} (not yet in the client codec)"
            )))
        }
    })
}

fn str_bytes(s: &PyBackedStr) -> StrBytes {
    StrBytes::from_string(String::from(&**s))
}

// --- responses: crate types -> messages dataclasses ---------------------------------------------

/// `messages.<cls>(**kwargs)` (the parent's `obj!`, kept local: macros do not cross files).
macro_rules! obj {
    ($py:expr, $cls:literal, $($k:ident = $v:expr),* $(,)?) => {{
        let kw = PyDict::new($py);
        $( kw.set_item(intern!($py, stringify!($k)), $v)?; )*
        messages($py)?.getattr(intern!($py, $cls))?.call((), Some(&kw))?
    }};
}

/// `Errors.for_code(code)`: unknown codes become UNKNOWN_SERVER_ERROR, as Kafka's `Errors.forCode`.
fn error<'py>(py: Python<'py>, code: i16) -> PyResult<Bound<'py, PyAny>> {
    messages(py)?
        .getattr(intern!(py, "Errors"))?
        .call_method1(intern!(py, "for_code"), (code,))
}

fn leader<'py>(py: Python<'py>, id: i32, epoch: i32) -> PyResult<Bound<'py, PyAny>> {
    Ok(obj!(
        py,
        "LeaderIdAndEpoch",
        leader_id = id,
        leader_epoch = epoch
    ))
}

fn ids(list: &[km::BrokerId]) -> Vec<i32> {
    list.iter().map(|b| b.0).collect()
}

fn response_object<'py>(
    py: Python<'py>,
    body: &ResponseKind,
    v: i16,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match body {
        ResponseKind::ApiVersions(r) => {
            // ApiVersionRange lives next to ApiVersionsResponse, wherever the package puts it.
            let module: String = messages(py)?
                .getattr(intern!(py, "ApiVersionsResponse"))?
                .getattr(intern!(py, "__module__"))?
                .extract()?;
            let range = py.import(module)?.getattr(intern!(py, "ApiVersionRange"))?;
            let keys = tuple(
                py,
                r.api_keys
                    .iter()
                    .map(|k| range.call1((k.api_key, k.min_version, k.max_version))),
            )?;
            // v3+ (KIP-584): the cluster's finalized feature levels (`transaction.version`, ...)
            let features = tuple(
                py,
                r.finalized_features
                    .iter()
                    .map(|f| Ok((f.name.as_str(), f.max_version_level))),
            )?;
            obj!(
                py,
                "ApiVersionsResponse",
                api_keys = keys,
                error_code = error(py, r.error_code)?,
                throttle_time_ms = r.throttle_time_ms,
                version = v,
                finalized_features = features,
                finalized_features_epoch = r.finalized_features_epoch
            )
        }
        ResponseKind::Metadata(r) => {
            let brokers = tuple(
                py,
                r.brokers.iter().map(|b| {
                    Ok(obj!(
                        py,
                        "MetadataResponseBroker",
                        node_id = b.node_id.0,
                        host = b.host.as_str(),
                        port = b.port,
                        rack = b.rack.as_deref()
                    ))
                }),
            )?;
            let topics = tuple(
                py,
                r.topics.iter().map(|t| {
                    let partitions = tuple(
                        py,
                        t.partitions.iter().map(|p| {
                            Ok(obj!(
                                py,
                                "MetadataResponsePartition",
                                partition_index = p.partition_index,
                                leader_id = p.leader_id.0,
                                leader_epoch = p.leader_epoch,
                                replica_nodes = PyTuple::new(py, ids(&p.replica_nodes))?,
                                isr_nodes = PyTuple::new(py, ids(&p.isr_nodes))?,
                                offline_replicas = PyTuple::new(py, ids(&p.offline_replicas))?,
                                error_code = error(py, p.error_code)?
                            ))
                        }),
                    )?;
                    let topic_id = (!t.topic_id.is_nil()).then(|| t.topic_id.to_string());
                    Ok(obj!(
                        py,
                        "MetadataResponseTopic",
                        name = t.name.as_deref().map(|n| n.as_str()).unwrap_or_default(),
                        partitions = partitions,
                        topic_id = topic_id,
                        error_code = error(py, t.error_code)?,
                        is_internal = t.is_internal
                    ))
                }),
            )?;
            obj!(
                py,
                "MetadataResponse",
                topics = topics,
                brokers = brokers,
                cluster_id = r.cluster_id.as_deref(),
                controller_id = r.controller_id.0,
                version = v,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::Fetch(r) => {
            let parts = r.responses.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    let diverging =
                        if p.diverging_epoch.epoch >= 0 || p.diverging_epoch.end_offset >= 0 {
                            Some(obj!(
                                py,
                                "DivergingEpoch",
                                epoch = p.diverging_epoch.epoch,
                                end_offset = p.diverging_epoch.end_offset
                            ))
                        } else {
                            None
                        };
                    let aborted = match &p.aborted_transactions {
                        None => None,
                        Some(list) => Some(tuple(
                            py,
                            list.iter().map(|a| {
                                Ok(obj!(
                                    py,
                                    "AbortedTransaction",
                                    producer_id = a.producer_id.0,
                                    first_offset = a.first_offset
                                ))
                            }),
                        )?),
                    };
                    let records = PyBytes::new(py, p.records.as_deref().unwrap_or_default());
                    Ok(obj!(
                        py,
                        "FetchPartitionData",
                        topic = t.topic.as_str(),
                        partition_index = p.partition_index,
                        error_code = error(py, p.error_code)?,
                        high_watermark = p.high_watermark,
                        last_stable_offset = p.last_stable_offset,
                        log_start_offset = p.log_start_offset,
                        diverging_epoch = diverging,
                        current_leader = leader(
                            py,
                            p.current_leader.leader_id.0,
                            p.current_leader.leader_epoch
                        )?,
                        preferred_read_replica = p.preferred_read_replica.0,
                        records = records,
                        aborted_transactions = aborted
                    ))
                })
            });
            obj!(
                py,
                "FetchResponse",
                partitions = tuple(py, parts)?,
                error_code = error(py, r.error_code)?,
                throttle_time_ms = r.throttle_time_ms,
                session_id = r.session_id
            )
        }
        ResponseKind::ListOffsets(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "ListOffsetsPartitionResponse",
                        topic = t.name.as_str(),
                        partition_index = p.partition_index,
                        error_code = error(py, p.error_code)?,
                        timestamp = p.timestamp,
                        offset = p.offset,
                        leader_epoch = p.leader_epoch
                    ))
                })
            });
            obj!(
                py,
                "ListOffsetsResponse",
                partitions = tuple(py, parts)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::OffsetForLeaderEpoch(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "EpochEndOffset",
                        topic = t.topic.as_str(),
                        partition_index = p.partition,
                        error_code = error(py, p.error_code)?,
                        leader_epoch = p.leader_epoch,
                        end_offset = p.end_offset
                    ))
                })
            });
            obj!(
                py,
                "OffsetsForLeaderEpochResponse",
                partitions = tuple(py, parts)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::OffsetCommit(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "OffsetCommitPartitionResponse",
                        topic = t.name.as_str(),
                        partition_index = p.partition_index,
                        error_code = error(py, p.error_code)?
                    ))
                })
            });
            obj!(
                py,
                "OffsetCommitResponse",
                partitions = tuple(py, parts)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::OffsetFetch(r) => {
            let partition = |topic: &str,
                             index: i32,
                             offset: i64,
                             epoch: i32,
                             md: &Option<StrBytes>,
                             code: i16| {
                Ok(obj!(
                    py,
                    "OffsetFetchPartitionResponse",
                    topic = topic,
                    partition_index = index,
                    committed_offset = offset,
                    committed_leader_epoch = epoch,
                    metadata = md.as_deref().unwrap_or_default(),
                    error_code = error(py, code)?
                ))
            };
            let (group_id, error_code, parts) = if v >= 8 {
                let [g] = r.groups.as_slice() else {
                    return Err(crate::Error::corrupt_frame(
                        0,
                        format!(
                            "OffsetFetch v{v} answer for {} groups, one asked",
                            r.groups.len()
                        ),
                    )
                    .into());
                };
                let parts = tuple(
                    py,
                    g.topics.iter().flat_map(|t| {
                        t.partitions.iter().map(move |p| {
                            partition(
                                t.name.as_str(),
                                p.partition_index,
                                p.committed_offset,
                                p.committed_leader_epoch,
                                &p.metadata,
                                p.error_code,
                            )
                        })
                    }),
                )?;
                (g.group_id.as_str().to_owned(), g.error_code, parts)
            } else {
                let parts = tuple(
                    py,
                    r.topics.iter().flat_map(|t| {
                        t.partitions.iter().map(move |p| {
                            partition(
                                t.name.as_str(),
                                p.partition_index,
                                p.committed_offset,
                                p.committed_leader_epoch,
                                &p.metadata,
                                p.error_code,
                            )
                        })
                    }),
                )?;
                (String::new(), r.error_code, parts)
            };
            obj!(
                py,
                "OffsetFetchResponse",
                partitions = parts,
                error_code = error(py, error_code)?,
                version = v,
                throttle_time_ms = r.throttle_time_ms,
                group_id = group_id
            )
        }
        ResponseKind::FindCoordinator(r) => {
            let coordinators = if v >= 4 {
                tuple(
                    py,
                    r.coordinators.iter().map(|c| {
                        Ok(obj!(
                            py,
                            "Coordinator",
                            key = c.key.as_str(),
                            node_id = c.node_id.0,
                            host = c.host.as_str(),
                            port = c.port,
                            error_code = error(py, c.error_code)?,
                            error_message = c.error_message.as_deref()
                        ))
                    }),
                )?
            } else {
                tuple(
                    py,
                    [Ok(obj!(
                        py,
                        "Coordinator",
                        key = "",
                        node_id = r.node_id.0,
                        host = r.host.as_str(),
                        port = r.port,
                        error_code = error(py, r.error_code)?,
                        error_message = r.error_message.as_deref()
                    ))],
                )?
            };
            obj!(
                py,
                "FindCoordinatorResponse",
                coordinators = coordinators,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::Produce(r) => {
            let parts = r.responses.iter().flat_map(|t| {
                t.partition_responses.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "ProducePartitionResponse",
                        topic = t.name.as_str(),
                        partition_index = p.index,
                        error_code = error(py, p.error_code)?,
                        base_offset = p.base_offset,
                        log_append_time_ms = p.log_append_time_ms,
                        log_start_offset = p.log_start_offset,
                        current_leader = leader(
                            py,
                            p.current_leader.leader_id.0,
                            p.current_leader.leader_epoch
                        )?
                    ))
                })
            });
            obj!(
                py,
                "ProduceResponse",
                partitions = tuple(py, parts)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::InitProducerId(r) => obj!(
            py,
            "InitProducerIdResponse",
            error_code = error(py, r.error_code)?,
            producer_id = r.producer_id.0,
            producer_epoch = r.producer_epoch,
            throttle_time_ms = r.throttle_time_ms
        ),
        ResponseKind::AddPartitionsToTxn(r) => {
            let parts = r.results_by_topic_v3_and_below.iter().flat_map(|t| {
                t.results_by_partition.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "TxnPartitionResult",
                        topic = t.name.as_str(),
                        partition_index = p.partition_index,
                        error_code = error(py, p.partition_error_code)?
                    ))
                })
            });
            obj!(
                py,
                "AddPartitionsToTxnResponse",
                partitions = tuple(py, parts)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::AddOffsetsToTxn(r) => obj!(
            py,
            "AddOffsetsToTxnResponse",
            error_code = error(py, r.error_code)?,
            throttle_time_ms = r.throttle_time_ms
        ),
        ResponseKind::TxnOffsetCommit(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "TxnPartitionResult",
                        topic = t.name.as_str(),
                        partition_index = p.partition_index,
                        error_code = error(py, p.error_code)?
                    ))
                })
            });
            obj!(
                py,
                "TxnOffsetCommitResponse",
                partitions = tuple(py, parts)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::EndTxn(r) => obj!(
            py,
            "EndTxnResponse",
            error_code = error(py, r.error_code)?,
            throttle_time_ms = r.throttle_time_ms,
            // v5 (transaction version 2): the id and epoch after the coordinator's bump; -1 before
            producer_id = if v >= 5 { r.producer_id.0 } else { -1 },
            producer_epoch = if v >= 5 { r.producer_epoch } else { -1 }
        ),
        ResponseKind::ListGroups(r) => {
            let groups = r.groups.iter().map(|g| {
                Ok(obj!(
                    py,
                    "ListedGroup",
                    group_id = g.group_id.as_str(),
                    protocol_type = g.protocol_type.as_str(),
                    group_state = g.group_state.as_str(),
                    group_type = g.group_type.as_str()
                ))
            });
            obj!(
                py,
                "ListGroupsResponse",
                groups = tuple(py, groups)?,
                error_code = error(py, r.error_code)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::DescribeGroups(r) => {
            let groups = r.groups.iter().map(|g| {
                let members = g.members.iter().map(|m| m.member_id.as_str());
                Ok(obj!(
                    py,
                    "DescribedGroup",
                    group_id = g.group_id.as_str(),
                    error_code = error(py, g.error_code)?,
                    group_state = g.group_state.as_str(),
                    protocol_type = g.protocol_type.as_str(),
                    members = PyTuple::new(py, members)?
                ))
            });
            obj!(
                py,
                "DescribeGroupsResponse",
                groups = tuple(py, groups)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::DescribeProducers(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    let producers = p.active_producers.iter().map(|s| {
                        Ok(obj!(
                            py,
                            "ProducerState",
                            producer_id = s.producer_id.0,
                            producer_epoch = s.producer_epoch,
                            last_sequence = s.last_sequence,
                            last_timestamp = s.last_timestamp,
                            coordinator_epoch = s.coordinator_epoch,
                            current_txn_start_offset = s.current_txn_start_offset
                        ))
                    });
                    Ok(obj!(
                        py,
                        "DescribeProducersPartition",
                        topic = t.name.as_str(),
                        partition_index = p.partition_index,
                        error_code = error(py, p.error_code)?,
                        error_message = p.error_message.as_deref(),
                        active_producers = tuple(py, producers)?
                    ))
                })
            });
            obj!(
                py,
                "DescribeProducersResponse",
                partitions = tuple(py, parts)?,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::JoinGroup(r) => {
            let members = tuple(
                py,
                r.members.iter().map(|m| {
                    Ok(obj!(
                        py,
                        "JoinGroupMember",
                        member_id = m.member_id.as_str(),
                        metadata = PyBytes::new(py, &m.metadata),
                        group_instance_id = m.group_instance_id.as_deref()
                    ))
                }),
            )?;
            obj!(
                py,
                "JoinGroupResponse",
                error_code = error(py, r.error_code)?,
                generation_id = r.generation_id,
                protocol_type = r.protocol_type.as_deref(),
                protocol_name = r.protocol_name.as_deref(),
                leader = r.leader.as_str(),
                member_id = r.member_id.as_str(),
                members = members,
                skip_assignment = r.skip_assignment,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        ResponseKind::SyncGroup(r) => obj!(
            py,
            "SyncGroupResponse",
            error_code = error(py, r.error_code)?,
            assignment = PyBytes::new(py, &r.assignment),
            protocol_type = r.protocol_type.as_deref(),
            protocol_name = r.protocol_name.as_deref(),
            throttle_time_ms = r.throttle_time_ms
        ),
        ResponseKind::SaslHandshake(r) => obj!(
            py,
            "SaslHandshakeResponse",
            error_code = error(py, r.error_code)?,
            mechanisms = tuple(py, r.mechanisms.iter().map(|m| Ok(m.as_str())))?
        ),
        ResponseKind::SaslAuthenticate(r) => obj!(
            py,
            "SaslAuthenticateResponse",
            error_code = error(py, r.error_code)?,
            error_message = r.error_message.as_deref(),
            auth_bytes = PyBytes::new(py, &r.auth_bytes),
            session_lifetime_ms = r.session_lifetime_ms
        ),
        ResponseKind::Heartbeat(r) => obj!(
            py,
            "HeartbeatResponse",
            error_code = error(py, r.error_code)?,
            throttle_time_ms = r.throttle_time_ms
        ),
        ResponseKind::LeaveGroup(r) => {
            let members = tuple(
                py,
                r.members.iter().map(|m| {
                    Ok(obj!(
                        py,
                        "LeaveGroupMemberResponse",
                        member_id = m.member_id.as_str(),
                        group_instance_id = m.group_instance_id.as_deref(),
                        error_code = error(py, m.error_code)?
                    ))
                }),
            )?;
            obj!(
                py,
                "LeaveGroupResponse",
                error_code = error(py, r.error_code)?,
                members = members,
                throttle_time_ms = r.throttle_time_ms
            )
        }
        _ => {
            return Err(PyValueError::new_err(
                "response kind not yet in the client codec",
            ))
        }
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_request, m)?)?;
    m.add_function(wrap_pyfunction!(decode_response, m)?)?;
    Ok(())
}
