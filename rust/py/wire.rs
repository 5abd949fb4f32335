//! The Kafka wire codec for Python: request frames -> `epochguard.protocol.messages` dataclasses, response
//! dataclasses -> frames. The one pyo3 bridge of `crate::wire`; the messages module is imported once.
//!
//! Conversions follow the flattened shapes of `epochguard.protocol.messages` (partitions carry their topic;
//! the codec groups them by topic again, in first-seen order). Record batches pass through as bytes:
//! a Fetch response's records are borrowed from the Python bytes (no copy until the frame is written),
//! a Produce request's records are one copy out of the frame.

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::messages::{self as km, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use pyo3::{intern, IntoPyObjectExt};

use crate::wire::{self, SUPPORTED};
use crate::Error;

/// The header of a request frame (`RequestHeader`: key, version, correlation id, client id).
#[pyclass(name = "RequestHeader", module = "epochguard._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyRequestHeader(pub wire::RequestHeader);

#[pymethods]
impl PyRequestHeader {
    #[new]
    #[pyo3(signature = (api_key, api_version, correlation_id, client_id=None))]
    fn new(api_key: i16, api_version: i16, correlation_id: i32, client_id: Option<String>) -> Self {
        PyRequestHeader(wire::RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
        })
    }
    #[getter]
    fn api_key(&self) -> i16 {
        self.0.api_key
    }
    #[getter]
    fn api_version(&self) -> i16 {
        self.0.api_version
    }
    #[getter]
    fn correlation_id(&self) -> i32 {
        self.0.correlation_id
    }
    #[getter]
    fn client_id(&self) -> Option<&str> {
        self.0.client_id.as_deref()
    }
    fn __repr__(&self) -> String {
        let client_id = match &self.0.client_id {
            Some(c) => format!("{c:?}"),
            None => "None".to_owned(),
        };
        format!(
            "RequestHeader(api_key={}, api_version={}, correlation_id={}, client_id={client_id})",
            self.0.api_key, self.0.api_version, self.0.correlation_id
        )
    }
}

/// An `UnsupportedVersion` error as `epochguard.errors.UnsupportedVersionError` with `.header`.
pub(crate) fn unsupported_version(py: Python<'_>, header: wire::RequestHeader) -> PyErr {
    let message = format!(
        "unsupported request: api key {} version {}",
        header.api_key, header.api_version
    );
    let made = (|| -> PyResult<PyErr> {
        let cls = py
            .import(intern!(py, "epochguard.errors"))?
            .getattr(intern!(py, "UnsupportedVersionError"))?;
        let exc = cls.call1((message,))?;
        exc.setattr(intern!(py, "header"), PyRequestHeader(header))?;
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|e| e)
}

/// Decode one request frame (the bytes after its 4-byte size prefix).
#[pyfunction]
fn decode_request<'py>(
    py: Python<'py>,
    frame: &Bound<'py, PyAny>,
) -> PyResult<(PyRequestHeader, Bound<'py, PyAny>)> {
    let frame = frame_bytes(frame)?;
    let (header, body) = py.detach(|| wire::decode_request(frame))?;
    let request = request_object(py, &body, header.api_version)?;
    Ok((PyRequestHeader(header), request))
}

/// Encode a response frame, size prefix included, at the request header's version.
#[pyfunction]
fn encode_response<'py>(
    py: Python<'py>,
    header: &PyRequestHeader,
    response: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut header = header.0.clone();
    // A v0 answer to an ApiVersions request of a version the broker does not know (Kafka's
    // `ApiVersionsRequest.getErrorResponse`): the client reads it with response header v0.
    if header.api_key == km::ApiKey::ApiVersions as i16
        && wire::supported(header.api_key, header.api_version).is_none()
    {
        header.api_version = 0;
    }
    if wire::supported(header.api_key, header.api_version).is_none() {
        return Err(PyValueError::new_err(format!(
            "no response encoding for api key {} version {}",
            header.api_key, header.api_version
        )));
    }
    let body = response_kind(response, header.api_key, header.api_version)?;
    let frame = py.detach(|| wire::encode_response(&header, &body))?;
    Ok(PyBytes::new(py, &frame))
}

/// The frame as `Bytes` without a copy for `bytes` (the Python object is kept alive by the owner).
fn frame_bytes(frame: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = frame.extract::<PyBackedBytes>() {
        return Ok(Bytes::from_owner(b));
    }
    let buffer = pyo3::buffer::PyBuffer::<u8>::get(frame)?;
    Ok(Bytes::from(buffer.to_vec(frame.py())?))
}

// --- requests: crate types -> messages dataclasses -----------------------------------------------

fn messages(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MESSAGES: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(MESSAGES
        .get_or_try_init(py, || {
            py.import("epochguard.protocol.messages").map(Bound::unbind)
        })?
        .bind(py))
}

/// `messages.<cls>(**kwargs)`.
macro_rules! obj {
    ($py:expr, $cls:literal, $($k:ident = $v:expr),* $(,)?) => {{
        let kw = PyDict::new($py);
        $( kw.set_item(intern!($py, stringify!($k)), $v)?; )*
        messages($py)?.getattr(intern!($py, $cls))?.call((), Some(&kw))?
    }};
}

fn tuple<'py, T, I>(py: Python<'py>, items: I) -> PyResult<Bound<'py, PyTuple>>
where
    I: IntoIterator<Item = PyResult<T>>,
    T: IntoPyObject<'py>,
{
    let items = items.into_iter().collect::<PyResult<Vec<T>>>()?;
    PyTuple::new(py, items)
}

fn opt_str(s: &Option<StrBytes>) -> Option<&str> {
    s.as_deref()
}

fn tp<'py>(py: Python<'py>, topic: &str, partition: i32) -> PyResult<Bound<'py, PyAny>> {
    messages(py)?
        .getattr(intern!(py, "TopicPartition"))?
        .call1((topic, partition))
}

fn isolation<'py>(py: Python<'py>, level: i8) -> PyResult<Bound<'py, PyAny>> {
    messages(py)?
        .getattr(intern!(py, "IsolationLevel"))?
        .call1((level,))
}

fn request_object<'py>(
    py: Python<'py>,
    body: &RequestKind,
    version: i16,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match body {
        RequestKind::ApiVersions(r) => obj!(
            py,
            "ApiVersionsRequest",
            client_software_name = r.client_software_name.as_str(),
            client_software_version = r.client_software_version.as_str(),
            version = version
        ),
        RequestKind::Metadata(r) => {
            // v0: an empty list means every topic (there is no null); v1+: null means every topic.
            let topics = match &r.topics {
                None => None,
                Some(t) if t.is_empty() && version == 0 => None,
                Some(t) => Some(tuple(
                    py,
                    t.iter()
                        .map(|t| Ok(t.name.as_ref().map(|n| n.as_str()).unwrap_or_default())),
                )?),
            };
            obj!(
                py,
                "MetadataRequest",
                topics = topics,
                allow_auto_topic_creation = r.allow_auto_topic_creation,
                version = version
            )
        }
        RequestKind::Produce(r) => {
            let parts = r.topic_data.iter().flat_map(|t| {
                t.partition_data.iter().map(move |p| {
                    let records = PyBytes::new(py, p.records.as_deref().unwrap_or_default());
                    Ok(obj!(
                        py,
                        "ProducePartition",
                        topic = t.name.as_str(),
                        partition_index = p.index,
                        records = records
                    ))
                })
            });
            obj!(
                py,
                "ProduceRequest",
                partitions = tuple(py, parts)?,
                acks = r.acks,
                timeout_ms = r.timeout_ms,
                version = version,
                transactional_id = r.transactional_id.as_ref().map(|t| t.as_str())
            )
        }
        RequestKind::Fetch(r) => {
            // v13+ names topics by id (KIP-516): the topic stays "" and `topic_id` carries the id in
            // Kafka's printed form; the broker's request layer resolves it (UNKNOWN_TOPIC_ID if it cannot).
            let by_id = version >= 13;
            let parts = r.topics.iter().flat_map(|t| {
                let topic_id = by_id.then(|| wire::format_topic_id(*t.topic_id.as_bytes()));
                t.partitions.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "FetchPartition",
                        topic = t.topic.as_str(),
                        partition_index = p.partition,
                        fetch_offset = p.fetch_offset,
                        current_leader_epoch = p.current_leader_epoch,
                        last_fetched_epoch = p.last_fetched_epoch,
                        log_start_offset = p.log_start_offset,
                        partition_max_bytes = p.partition_max_bytes,
                        topic_id = topic_id.clone()
                    ))
                })
            });
            let forgotten = r.forgotten_topics_data.iter().flat_map(|t| {
                let topic = if by_id {
                    wire::format_topic_id(*t.topic_id.as_bytes())
                } else {
                    t.topic.to_string()
                };
                t.partitions.iter().map(move |p| tp(py, &topic, *p))
            });
            // v15 moved ReplicaId (and the follower's broker epoch) into the tagged ReplicaState.
            let (replica_id, replica_epoch) = if version >= 15 {
                (r.replica_state.replica_id.0, r.replica_state.replica_epoch)
            } else {
                (r.replica_id.0, -1)
            };
            obj!(
                py,
                "FetchRequest",
                partitions = tuple(py, parts)?,
                replica_id = replica_id,
                replica_epoch = replica_epoch,
                isolation_level = isolation(py, r.isolation_level)?,
                max_wait_ms = r.max_wait_ms,
                min_bytes = r.min_bytes,
                max_bytes = r.max_bytes,
                rack_id = r.rack_id.as_str(),
                version = version,
                session_id = r.session_id,
                session_epoch = r.session_epoch,
                forgotten_topics = tuple(py, forgotten)?
            )
        }
        RequestKind::ListOffsets(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "ListOffsetsPartition",
                        topic = t.name.as_str(),
                        partition_index = p.partition_index,
                        timestamp = p.timestamp,
                        current_leader_epoch = p.current_leader_epoch
                    ))
                })
            });
            obj!(
                py,
                "ListOffsetsRequest",
                partitions = tuple(py, parts)?,
                replica_id = r.replica_id.0,
                isolation_level = isolation(py, r.isolation_level)?,
                version = version
            )
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    Ok(obj!(
                        py,
                        "OffsetForLeaderPartition",
                        topic = t.topic.as_str(),
                        partition_index = p.partition,
                        leader_epoch = p.leader_epoch,
                        current_leader_epoch = p.current_leader_epoch
                    ))
                })
            });
            obj!(
                py,
                "OffsetsForLeaderEpochRequest",
                partitions = tuple(py, parts)?,
                replica_id = r.replica_id.0,
                version = version
            )
        }
        RequestKind::OffsetCommit(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    offset_commit_partition(
                        py,
                        t.name.as_str(),
                        (
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                        ),
                        &p.committed_metadata,
                    )
                })
            });
            obj!(
                py,
                "OffsetCommitRequest",
                group_id = r.group_id.as_str(),
                partitions = tuple(py, parts)?,
                generation_id_or_member_epoch = r.generation_id_or_member_epoch,
                member_id = r.member_id.as_str(),
                version = version,
                group_instance_id = opt_str(&r.group_instance_id)
            )
        }
        RequestKind::OffsetFetch(r) => offset_fetch_request(py, r, version)?,
        RequestKind::InitProducerId(r) => obj!(
            py,
            "InitProducerIdRequest",
            transactional_id = r.transactional_id.as_ref().map(|t| t.as_str()),
            transaction_timeout_ms = r.transaction_timeout_ms,
            producer_id = r.producer_id.0,
            producer_epoch = r.producer_epoch,
            version = version
        ),
        RequestKind::FindCoordinator(r) => {
            let keys: Vec<&str> = if version >= 4 {
                r.coordinator_keys.iter().map(|k| k.as_str()).collect()
            } else {
                vec![r.key.as_str()]
            };
            obj!(
                py,
                "FindCoordinatorRequest",
                key = r.key.as_str(),
                key_type = r.key_type,
                coordinator_keys = PyTuple::new(py, keys)?,
                version = version
            )
        }
        RequestKind::JoinGroup(r) => {
            let protocols = r.protocols.iter().map(|p| {
                Ok(obj!(
                    py,
                    "JoinGroupProtocol",
                    name = p.name.as_str(),
                    metadata = PyBytes::new(py, &p.metadata)
                ))
            });
            // v0 has no rebalance timeout: the group uses the session timeout (JoinGroupRequest v0).
            let rebalance = if version == 0 {
                r.session_timeout_ms
            } else {
                r.rebalance_timeout_ms
            };
            obj!(
                py,
                "JoinGroupRequest",
                group_id = r.group_id.as_str(),
                session_timeout_ms = r.session_timeout_ms,
                member_id = r.member_id.as_str(),
                protocol_type = r.protocol_type.as_str(),
                protocols = tuple(py, protocols)?,
                rebalance_timeout_ms = rebalance,
                group_instance_id = opt_str(&r.group_instance_id),
                reason = opt_str(&r.reason),
                version = version
            )
        }
        RequestKind::SyncGroup(r) => {
            let assignments = r.assignments.iter().map(|a| {
                Ok(obj!(
                    py,
                    "SyncGroupAssignment",
                    member_id = a.member_id.as_str(),
                    assignment = PyBytes::new(py, &a.assignment)
                ))
            });
            obj!(
                py,
                "SyncGroupRequest",
                group_id = r.group_id.as_str(),
                generation_id = r.generation_id,
                member_id = r.member_id.as_str(),
                assignments = tuple(py, assignments)?,
                group_instance_id = opt_str(&r.group_instance_id),
                protocol_type = opt_str(&r.protocol_type),
                protocol_name = opt_str(&r.protocol_name),
                version = version
            )
        }
        RequestKind::Heartbeat(r) => obj!(
            py,
            "HeartbeatRequest",
            group_id = r.group_id.as_str(),
            generation_id = r.generation_id,
            member_id = r.member_id.as_str(),
            group_instance_id = opt_str(&r.group_instance_id),
            version = version
        ),
        RequestKind::LeaveGroup(r) => {
            let members = if version >= 3 {
                tuple(
                    py,
                    r.members.iter().map(|m| {
                        Ok(obj!(
                            py,
                            "LeaveGroupMember",
                            member_id = m.member_id.as_str(),
                            group_instance_id = opt_str(&m.group_instance_id),
                            reason = opt_str(&m.reason)
                        ))
                    }),
                )?
            } else {
                tuple(
                    py,
                    [Ok(obj!(
                        py,
                        "LeaveGroupMember",
                        member_id = r.member_id.as_str()
                    ))],
                )?
            };
            obj!(
                py,
                "LeaveGroupRequest",
                group_id = r.group_id.as_str(),
                members = members,
                version = version
            )
        }
        RequestKind::AddPartitionsToTxn(r) => {
            // v0-3 (the client's form): one transaction per request.
            let parts = r.v3_and_below_topics.iter().flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| tp(py, t.name.as_str(), *p))
            });
            obj!(
                py,
                "AddPartitionsToTxnRequest",
                transactional_id = r.v3_and_below_transactional_id.as_str(),
                producer_id = r.v3_and_below_producer_id.0,
                producer_epoch = r.v3_and_below_producer_epoch,
                partitions = tuple(py, parts)?,
                version = version
            )
        }
        RequestKind::AddOffsetsToTxn(r) => obj!(
            py,
            "AddOffsetsToTxnRequest",
            transactional_id = r.transactional_id.as_str(),
            producer_id = r.producer_id.0,
            producer_epoch = r.producer_epoch,
            group_id = r.group_id.as_str(),
            version = version
        ),
        RequestKind::TxnOffsetCommit(r) => {
            let parts = r.topics.iter().flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    offset_commit_partition(
                        py,
                        t.name.as_str(),
                        (
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                        ),
                        &p.committed_metadata,
                    )
                })
            });
            obj!(
                py,
                "TxnOffsetCommitRequest",
                transactional_id = r.transactional_id.as_str(),
                group_id = r.group_id.as_str(),
                producer_id = r.producer_id.0,
                producer_epoch = r.producer_epoch,
                partitions = tuple(py, parts)?,
                generation_id = r.generation_id,
                member_id = r.member_id.as_str(),
                group_instance_id = opt_str(&r.group_instance_id),
                version = version
            )
        }
        RequestKind::EndTxn(r) => obj!(
            py,
            "EndTxnRequest",
            transactional_id = r.transactional_id.as_str(),
            producer_id = r.producer_id.0,
            producer_epoch = r.producer_epoch,
            committed = r.committed,
            version = version
        ),
        _ => {
            return Err(PyValueError::new_err(
                "request kind outside the codec's table (a bug: decode_request checks it)",
            ))
        }
    })
}

/// `messages.OffsetCommitPartition` from (partition, offset, leader epoch) and metadata: OffsetCommit's
/// and TxnOffsetCommit's partitions carry the same fields in two crate types.
fn offset_commit_partition<'py>(
    py: Python<'py>,
    topic: &str,
    (partition_index, committed_offset, committed_leader_epoch): (i32, i64, i32),
    metadata: &Option<StrBytes>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(obj!(
        py,
        "OffsetCommitPartition",
        topic = topic,
        partition_index = partition_index,
        committed_offset = committed_offset,
        committed_leader_epoch = committed_leader_epoch,
        committed_metadata = opt_str(metadata).unwrap_or_default()
    ))
}

fn offset_fetch_request<'py>(
    py: Python<'py>,
    r: &km::OffsetFetchRequest,
    version: i16,
) -> PyResult<Bound<'py, PyAny>> {
    let (group_id, partitions) = if version >= 8 {
        // KIP-709 batches groups; the messages model one group per request, as clients send.
        let [group] = r.groups.as_slice() else {
            return Err(Error::corrupt_frame(
                0,
                format!(
                    "OffsetFetch v{version} for {} groups: this codec serves exactly one",
                    r.groups.len()
                ),
            )
            .into());
        };
        let parts = group.topics.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|t| {
                    t.partition_indexes
                        .iter()
                        .map(move |p| (t.name.as_str(), *p))
                })
                .collect::<Vec<_>>()
        });
        (group.group_id.as_str(), parts)
    } else {
        let parts = r.topics.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|t| {
                    t.partition_indexes
                        .iter()
                        .map(move |p| (t.name.as_str(), *p))
                })
                .collect::<Vec<_>>()
        });
        (r.group_id.as_str(), parts)
    };
    let partitions = match partitions {
        None => None,
        Some(ps) => Some(tuple(py, ps.into_iter().map(|(t, p)| tp(py, t, p)))?),
    };
    Ok(obj!(
        py,
        "OffsetFetchRequest",
        group_id = group_id,
        partitions = partitions,
        require_stable = r.require_stable,
        version = version
    ))
}

// --- responses: messages dataclasses -> crate types ----------------------------------------------

fn get<'py, T: FromPyObjectOwned<'py>>(o: &Bound<'py, PyAny>, name: &str) -> PyResult<T> {
    o.getattr(name)?.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        PyValueError::new_err(format!(
            "{}.{name}: {e}",
            o.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

fn str_bytes(s: PyBackedStr) -> StrBytes {
    StrBytes::from_string(String::from(&*s))
}

fn get_str(o: &Bound<'_, PyAny>, name: &str) -> PyResult<StrBytes> {
    Ok(str_bytes(get::<PyBackedStr>(o, name)?))
}

fn get_opt_str(o: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<StrBytes>> {
    Ok(get::<Option<PyBackedStr>>(o, name)?.map(str_bytes))
}

/// Bytes borrowed from the Python object (kept alive by the returned `Bytes`), no copy.
fn get_bytes(o: &Bound<'_, PyAny>, name: &str) -> PyResult<Bytes> {
    Ok(Bytes::from_owner(get::<PyBackedBytes>(o, name)?))
}

fn items<'py>(o: &Bound<'py, PyAny>, name: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    o.getattr(name)?.try_iter()?.collect()
}

/// Partitions grouped under their topics, topics in first-seen order (the messages are flat).
fn by_topic<T>(
    partitions: Vec<Bound<'_, PyAny>>,
    mut convert: impl FnMut(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<(StrBytes, Vec<T>)>> {
    let mut topics: Vec<(StrBytes, Vec<T>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for p in &partitions {
        let topic: PyBackedStr = get(p, "topic")?;
        let i = *index.entry(String::from(&*topic)).or_insert_with(|| {
            topics.push((StrBytes::from_string(String::from(&*topic)), Vec::new()));
            topics.len() - 1
        });
        if let Some((_, list)) = topics.get_mut(i) {
            list.push(convert(p)?);
        }
    }
    Ok(topics)
}

/// As [`by_topic`], keyed by (topic, topic id) when `by_id` (Fetch v13+: each topic is sent by its id,
/// and an unknown id answered UNKNOWN_TOPIC_ID has no name): the id parsed from `topic_id`, required.
#[allow(clippy::type_complexity)]
fn by_topic_and_id<T>(
    partitions: Vec<Bound<'_, PyAny>>,
    by_id: bool,
    mut convert: impl FnMut(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<(StrBytes, Option<[u8; 16]>, Vec<T>)>> {
    let mut topics: Vec<(StrBytes, Option<[u8; 16]>, Vec<T>)> = Vec::new();
    let mut index: HashMap<(String, Option<[u8; 16]>), usize> = HashMap::new();
    for p in &partitions {
        let topic: PyBackedStr = get(p, "topic")?;
        let id = if by_id {
            let Some(text) = get::<Option<PyBackedStr>>(p, "topic_id")? else {
                return Err(PyValueError::new_err(format!(
                    "{}-{}: a topic id is required from Fetch v13 on",
                    &*topic,
                    get::<i32>(p, "partition_index")?
                )));
            };
            Some(wire::parse_topic_id(&text).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "topic_id {:?} is neither Kafka's base64 nor a UUID",
                    &*text
                ))
            })?)
        } else {
            None
        };
        let i = *index.entry((String::from(&*topic), id)).or_insert_with(|| {
            topics.push((StrBytes::from_string(String::from(&*topic)), id, Vec::new()));
            topics.len() - 1
        });
        if let Some((_, _, list)) = topics.get_mut(i) {
            list.push(convert(p)?);
        }
    }
    Ok(topics)
}

fn response_kind(r: &Bound<'_, PyAny>, api_key: i16, version: i16) -> PyResult<ResponseKind> {
    let key = km::ApiKey::try_from(api_key)
        .map_err(|()| PyValueError::new_err(format!("unknown api key {api_key}")))?;
    let throttle: i32 = get(r, "throttle_time_ms")?;
    Ok(match key {
        km::ApiKey::ApiVersions => {
            let mut m = km::ApiVersionsResponse::default();
            m.error_code = get(r, "error_code")?;
            m.throttle_time_ms = throttle;
            for k in items(r, "api_keys")? {
                let mut v = km::api_versions_response::ApiVersion::default();
                v.api_key = get(&k, "api_key")?;
                v.min_version = get(&k, "min_version")?;
                v.max_version = get(&k, "max_version")?;
                m.api_keys.push(v);
            }
            ResponseKind::ApiVersions(m)
        }
        km::ApiKey::Metadata => ResponseKind::Metadata(metadata_response(r, throttle)?),
        km::ApiKey::Produce => {
            let mut m = km::ProduceResponse::default();
            m.throttle_time_ms = throttle;
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::produce_response::PartitionProduceResponse::default();
                out.index = get(p, "partition_index")?;
                out.error_code = get(p, "error_code")?;
                out.base_offset = get(p, "base_offset")?;
                out.log_append_time_ms = get(p, "log_append_time_ms")?;
                out.log_start_offset = get(p, "log_start_offset")?;
                if version >= 10 {
                    let leader = p.getattr(intern!(p.py(), "current_leader"))?;
                    out.current_leader.leader_id = km::BrokerId(get(&leader, "leader_id")?);
                    out.current_leader.leader_epoch = get(&leader, "leader_epoch")?;
                }
                Ok(out)
            })? {
                let mut t = km::produce_response::TopicProduceResponse::default();
                t.name = name.into();
                t.partition_responses = parts;
                m.responses.push(t);
            }
            if version >= 10 {
                for e in items(r, "node_endpoints")? {
                    let mut out = km::produce_response::NodeEndpoint::default();
                    out.node_id = km::BrokerId(get(&e, "node_id")?);
                    out.host = get_str(&e, "host")?;
                    out.port = get(&e, "port")?;
                    out.rack = get_opt_str(&e, "rack")?;
                    m.node_endpoints.push(out);
                }
            }
            ResponseKind::Produce(m)
        }
        km::ApiKey::Fetch => ResponseKind::Fetch(fetch_response(r, throttle, version)?),
        km::ApiKey::ListOffsets => {
            let mut m = km::ListOffsetsResponse::default();
            m.throttle_time_ms = throttle;
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::list_offsets_response::ListOffsetsPartitionResponse::default();
                out.partition_index = get(p, "partition_index")?;
                out.error_code = get(p, "error_code")?;
                out.timestamp = get(p, "timestamp")?;
                out.offset = get(p, "offset")?;
                if version >= 4 {
                    out.leader_epoch = get(p, "leader_epoch")?;
                }
                Ok(out)
            })? {
                let mut t = km::list_offsets_response::ListOffsetsTopicResponse::default();
                t.name = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            ResponseKind::ListOffsets(m)
        }
        km::ApiKey::OffsetForLeaderEpoch => {
            let mut m = km::OffsetForLeaderEpochResponse::default();
            m.throttle_time_ms = throttle;
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::offset_for_leader_epoch_response::EpochEndOffset::default();
                out.partition = get(p, "partition_index")?;
                out.error_code = get(p, "error_code")?;
                out.leader_epoch = get(p, "leader_epoch")?;
                out.end_offset = get(p, "end_offset")?;
                Ok(out)
            })? {
                let mut t =
                    km::offset_for_leader_epoch_response::OffsetForLeaderTopicResult::default();
                t.topic = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            ResponseKind::OffsetForLeaderEpoch(m)
        }
        km::ApiKey::OffsetCommit => {
            let mut m = km::OffsetCommitResponse::default();
            m.throttle_time_ms = throttle;
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out = km::offset_commit_response::OffsetCommitResponsePartition::default();
                out.partition_index = get(p, "partition_index")?;
                out.error_code = get(p, "error_code")?;
                Ok(out)
            })? {
                let mut t = km::offset_commit_response::OffsetCommitResponseTopic::default();
                t.name = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            ResponseKind::OffsetCommit(m)
        }
        km::ApiKey::OffsetFetch => {
            ResponseKind::OffsetFetch(offset_fetch_response(r, throttle, version)?)
        }
        km::ApiKey::InitProducerId => {
            let mut m = km::InitProducerIdResponse::default();
            m.throttle_time_ms = throttle;
            m.error_code = get(r, "error_code")?;
            m.producer_id = km::ProducerId(get(r, "producer_id")?);
            m.producer_epoch = get(r, "producer_epoch")?;
            ResponseKind::InitProducerId(m)
        }
        km::ApiKey::FindCoordinator => {
            let mut m = km::FindCoordinatorResponse::default();
            m.throttle_time_ms = throttle;
            let coordinators = items(r, "coordinators")?;
            if version >= 4 {
                for c in &coordinators {
                    let mut out = km::find_coordinator_response::Coordinator::default();
                    out.key = get_str(c, "key")?;
                    out.node_id = km::BrokerId(get(c, "node_id")?);
                    out.host = get_str(c, "host")?;
                    out.port = get(c, "port")?;
                    out.error_code = get(c, "error_code")?;
                    out.error_message = get_opt_str(c, "error_message")?;
                    m.coordinators.push(out);
                }
            } else if let Some(c) = coordinators.first() {
                m.node_id = km::BrokerId(get(c, "node_id")?);
                m.host = get_str(c, "host")?;
                m.port = get(c, "port")?;
                m.error_code = get(c, "error_code")?;
                m.error_message = get_opt_str(c, "error_message")?;
            } else {
                return Err(PyValueError::new_err(format!(
                    "FindCoordinator v{version} answers one coordinator, got none"
                )));
            }
            ResponseKind::FindCoordinator(m)
        }
        km::ApiKey::JoinGroup => {
            let mut m = km::JoinGroupResponse::default();
            m.throttle_time_ms = throttle;
            m.error_code = get(r, "error_code")?;
            m.generation_id = get(r, "generation_id")?;
            m.protocol_type = get_opt_str(r, "protocol_type")?;
            m.protocol_name = get_opt_str(r, "protocol_name")?;
            m.leader = get_str(r, "leader")?;
            m.member_id = get_str(r, "member_id")?;
            if version >= 9 {
                m.skip_assignment = get(r, "skip_assignment")?;
            }
            for member in items(r, "members")? {
                let mut out = km::join_group_response::JoinGroupResponseMember::default();
                out.member_id = get_str(&member, "member_id")?;
                out.group_instance_id = get_opt_str(&member, "group_instance_id")?;
                out.metadata = get_bytes(&member, "metadata")?;
                m.members.push(out);
            }
            ResponseKind::JoinGroup(m)
        }
        km::ApiKey::SyncGroup => {
            let mut m = km::SyncGroupResponse::default();
            m.throttle_time_ms = throttle;
            m.error_code = get(r, "error_code")?;
            m.protocol_type = get_opt_str(r, "protocol_type")?;
            m.protocol_name = get_opt_str(r, "protocol_name")?;
            m.assignment = get_bytes(r, "assignment")?;
            ResponseKind::SyncGroup(m)
        }
        km::ApiKey::Heartbeat => {
            let mut m = km::HeartbeatResponse::default();
            m.throttle_time_ms = throttle;
            m.error_code = get(r, "error_code")?;
            ResponseKind::Heartbeat(m)
        }
        km::ApiKey::LeaveGroup => {
            let mut m = km::LeaveGroupResponse::default();
            m.throttle_time_ms = throttle;
            m.error_code = get(r, "error_code")?;
            if version >= 3 {
                for member in items(r, "members")? {
                    let mut out = km::leave_group_response::MemberResponse::default();
                    out.member_id = get_str(&member, "member_id")?;
                    out.group_instance_id = get_opt_str(&member, "group_instance_id")?;
                    out.error_code = get(&member, "error_code")?;
                    m.members.push(out);
                }
            }
            ResponseKind::LeaveGroup(m)
        }
        km::ApiKey::AddPartitionsToTxn => {
            // v0-3: results by topic (v4+ nests them under each transaction).
            let mut m = km::AddPartitionsToTxnResponse::default();
            m.throttle_time_ms = throttle;
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out =
                    km::add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default(
                    );
                out.partition_index = get(p, "partition_index")?;
                out.partition_error_code = get(p, "error_code")?;
                Ok(out)
            })? {
                let mut t =
                    km::add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
                t.name = name.into();
                t.results_by_partition = parts;
                m.results_by_topic_v3_and_below.push(t);
            }
            ResponseKind::AddPartitionsToTxn(m)
        }
        km::ApiKey::AddOffsetsToTxn => {
            let mut m = km::AddOffsetsToTxnResponse::default();
            m.throttle_time_ms = throttle;
            m.error_code = get(r, "error_code")?;
            ResponseKind::AddOffsetsToTxn(m)
        }
        km::ApiKey::TxnOffsetCommit => {
            let mut m = km::TxnOffsetCommitResponse::default();
            m.throttle_time_ms = throttle;
            for (name, parts) in by_topic(items(r, "partitions")?, |p| {
                let mut out =
                    km::txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                out.partition_index = get(p, "partition_index")?;
                out.error_code = get(p, "error_code")?;
                Ok(out)
            })? {
                let mut t = km::txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                t.name = name.into();
                t.partitions = parts;
                m.topics.push(t);
            }
            ResponseKind::TxnOffsetCommit(m)
        }
        km::ApiKey::EndTxn => {
            let mut m = km::EndTxnResponse::default();
            m.throttle_time_ms = throttle;
            m.error_code = get(r, "error_code")?;
            ResponseKind::EndTxn(m)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "no response encoding for {other:?}"
            )))
        }
    })
}

fn metadata_response(r: &Bound<'_, PyAny>, throttle: i32) -> PyResult<km::MetadataResponse> {
    let mut m = km::MetadataResponse::default();
    m.throttle_time_ms = throttle;
    m.cluster_id = get_opt_str(r, "cluster_id")?;
    m.controller_id = km::BrokerId(get(r, "controller_id")?);
    for b in items(r, "brokers")? {
        let mut out = km::metadata_response::MetadataResponseBroker::default();
        out.node_id = km::BrokerId(get(&b, "node_id")?);
        out.host = get_str(&b, "host")?;
        out.port = get(&b, "port")?;
        out.rack = get_opt_str(&b, "rack")?;
        m.brokers.push(out);
    }
    for t in items(r, "topics")? {
        let mut out = km::metadata_response::MetadataResponseTopic::default();
        out.name = Some(get_str(&t, "name")?.into());
        out.error_code = get(&t, "error_code")?;
        out.is_internal = get(&t, "is_internal")?;
        if let Some(id) = get::<Option<PyBackedStr>>(&t, "topic_id")? {
            let bytes = wire::parse_topic_id(&id).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "topic_id {:?} is neither Kafka's base64 nor a UUID",
                    &*id
                ))
            })?;
            out.topic_id = uuid::Uuid::from_bytes(bytes);
        }
        for p in items(&t, "partitions")? {
            let mut part = km::metadata_response::MetadataResponsePartition::default();
            part.partition_index = get(&p, "partition_index")?;
            part.leader_id = km::BrokerId(get(&p, "leader_id")?);
            part.leader_epoch = get(&p, "leader_epoch")?;
            part.error_code = get(&p, "error_code")?;
            for (field, list) in [
                ("replica_nodes", &mut part.replica_nodes),
                ("isr_nodes", &mut part.isr_nodes),
                ("offline_replicas", &mut part.offline_replicas),
            ] {
                *list = get::<Vec<i32>>(&p, field)?
                    .into_iter()
                    .map(km::BrokerId)
                    .collect();
            }
            out.partitions.push(part);
        }
        m.topics.push(out);
    }
    Ok(m)
}

fn fetch_response(
    r: &Bound<'_, PyAny>,
    throttle: i32,
    version: i16,
) -> PyResult<km::FetchResponse> {
    let mut m = km::FetchResponse::default();
    m.throttle_time_ms = throttle;
    m.error_code = get(r, "error_code")?;
    if version >= 7 {
        m.session_id = get(r, "session_id")?;
    }
    let by_id = version >= 13;
    for (name, topic_id, parts) in by_topic_and_id(items(r, "partitions")?, by_id, |p| {
        let mut out = km::fetch_response::PartitionData::default();
        out.partition_index = get(p, "partition_index")?;
        out.error_code = get(p, "error_code")?;
        out.high_watermark = get(p, "high_watermark")?;
        out.last_stable_offset = get(p, "last_stable_offset")?;
        out.log_start_offset = get(p, "log_start_offset")?;
        // read_committed: the aborted transactions within the data returned; None is null, as
        // Kafka answers a read_uncommitted fetch.
        let aborted = p.getattr(intern!(p.py(), "aborted_transactions"))?;
        out.aborted_transactions = None;
        if !aborted.is_none() {
            let mut list = Vec::new();
            for a in aborted.try_iter()? {
                let a = a?;
                let mut t = km::fetch_response::AbortedTransaction::default();
                t.producer_id = km::ProducerId(get(&a, "producer_id")?);
                t.first_offset = get(&a, "first_offset")?;
                list.push(t);
            }
            out.aborted_transactions = Some(list);
        }
        if version >= 11 {
            out.preferred_read_replica = km::BrokerId(get(p, "preferred_read_replica")?);
        }
        if version >= 12 {
            let diverging = p.getattr(intern!(p.py(), "diverging_epoch"))?;
            if !diverging.is_none() {
                out.diverging_epoch.epoch = get(&diverging, "epoch")?;
                out.diverging_epoch.end_offset = get(&diverging, "end_offset")?;
            }
            let leader = p.getattr(intern!(p.py(), "current_leader"))?;
            out.current_leader.leader_id = km::BrokerId(get(&leader, "leader_id")?);
            out.current_leader.leader_epoch = get(&leader, "leader_epoch")?;
        }
        // Empty records are zero-length, never null (clients differ on null).
        out.records = Some(get_bytes(p, "records")?);
        Ok(out)
    })? {
        let mut t = km::fetch_response::FetchableTopicResponse::default();
        // One or the other: the crate refuses a name at v13+ and an id below.
        match topic_id {
            Some(id) => t.topic_id = uuid::Uuid::from_bytes(id),
            None => t.topic = name.into(),
        }
        t.partitions = parts;
        m.responses.push(t);
    }
    if version >= 16 {
        for e in items(r, "node_endpoints")? {
            let mut out = km::fetch_response::NodeEndpoint::default();
            out.node_id = km::BrokerId(get(&e, "node_id")?);
            out.host = get_str(&e, "host")?;
            out.port = get(&e, "port")?;
            out.rack = get_opt_str(&e, "rack")?;
            m.node_endpoints.push(out);
        }
    }
    Ok(m)
}

fn offset_fetch_response(
    r: &Bound<'_, PyAny>,
    throttle: i32,
    version: i16,
) -> PyResult<km::OffsetFetchResponse> {
    let mut m = km::OffsetFetchResponse::default();
    m.throttle_time_ms = throttle;
    let error_code: i16 = get(r, "error_code")?;
    let partitions = items(r, "partitions")?;
    if version >= 8 {
        let mut group = km::offset_fetch_response::OffsetFetchResponseGroup::default();
        group.group_id = get_str(r, "group_id")?.into();
        group.error_code = error_code;
        for (name, parts) in by_topic(partitions, |p| {
            let mut out = km::offset_fetch_response::OffsetFetchResponsePartitions::default();
            out.partition_index = get(p, "partition_index")?;
            out.committed_offset = get(p, "committed_offset")?;
            out.committed_leader_epoch = get(p, "committed_leader_epoch")?;
            out.metadata = get_opt_str(p, "metadata")?;
            out.error_code = get(p, "error_code")?;
            Ok(out)
        })? {
            let mut t = km::offset_fetch_response::OffsetFetchResponseTopics::default();
            t.name = name.into();
            t.partitions = parts;
            group.topics.push(t);
        }
        m.groups.push(group);
    } else {
        m.error_code = error_code;
        for (name, parts) in by_topic(partitions, |p| {
            let mut out = km::offset_fetch_response::OffsetFetchResponsePartition::default();
            out.partition_index = get(p, "partition_index")?;
            out.committed_offset = get(p, "committed_offset")?;
            out.committed_leader_epoch = get(p, "committed_leader_epoch")?;
            out.metadata = get_opt_str(p, "metadata")?;
            out.error_code = get(p, "error_code")?;
            Ok(out)
        })? {
            let mut t = km::offset_fetch_response::OffsetFetchResponseTopic::default();
            t.name = name.into();
            t.partitions = parts;
            m.topics.push(t);
        }
    }
    Ok(m)
}

/// A produced partition's batches with base offsets and leader epoch stamped (one copy of `data`):
/// `(stamped bytes, last offset, record count, max timestamp)`. Raises CorruptRecordError (nothing
/// stamped) unless `data` is whole, CRC-valid magic v2 batches.
#[pyfunction]
fn stamp_batches<'py>(
    py: Python<'py>,
    data: &[u8],
    base_offset: i64,
    partition_leader_epoch: i32,
) -> PyResult<(Bound<'py, PyBytes>, i64, i64, i64)> {
    let mut out = data.to_vec();
    let s = py.detach(|| {
        crate::records::stamp::stamp_batches(&mut out, base_offset, partition_leader_epoch)
    })?;
    Ok((
        PyBytes::new(py, &out),
        s.last_offset,
        s.record_count,
        s.max_timestamp,
    ))
}

/// `[(api_key, min_version, max_version)]`: what the codec decodes and encodes.
fn wire_api_versions() -> Vec<(i16, i16, i16)> {
    SUPPORTED
        .iter()
        .map(|(k, lo, hi)| (*k as i16, *lo, *hi))
        .collect()
}

/// `[(api_key, min_version, max_version)]`: what the client's half encodes (and decodes the answers
/// of): the served APIs within `CLIENT_CAPS` and up to `CLIENT_BEYOND`, plus the client-only ones (SASL).
fn client_api_versions() -> Vec<(i16, i16, i16)> {
    SUPPORTED
        .iter()
        .map(|(k, lo, hi)| (*k, *lo, wire::client_cap(*k, *hi)))
        .chain(wire::CLIENT_ONLY.iter().copied())
        .map(|(k, lo, hi)| (k as i16, lo, hi))
        .collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRequestHeader>()?;
    m.add_function(wrap_pyfunction!(decode_request, m)?)?;
    m.add_function(wrap_pyfunction!(encode_response, m)?)?;
    m.add_function(wrap_pyfunction!(stamp_batches, m)?)?;
    client::register(m)?;
    m.add("MAX_FRAME_BYTES", wire::MAX_FRAME_BYTES)?;
    m.add(
        "WIRE_API_VERSIONS",
        wire_api_versions().into_py_any(m.py())?,
    )?;
    m.add(
        "CLIENT_API_VERSIONS",
        client_api_versions().into_py_any(m.py())?,
    )?;
    Ok(())
}

/// The client's half: requests out, responses in (`epochguard.client`).
mod client;
