//! A map keyed by (topic, queue id) that looks up with a borrowed topic, so the per-message
//! paths (queue lookup, arrival events, held pulls) allocate nothing. It hashes with foldhash,
//! seeded per process: a put looks its topic up several times, which cost over a tenth of a
//! single put's instructions with SipHash.

use foldhash::HashMap;

pub struct QueueMap<V> {
    by_topic: HashMap<String, HashMap<i32, V>>,
}

impl<V> Default for QueueMap<V> {
    fn default() -> Self {
        Self {
            by_topic: HashMap::default(),
        }
    }
}

impl<V> QueueMap<V> {
    pub fn get(&self, topic: &str, queue_id: i32) -> Option<&V> {
        self.by_topic.get(topic)?.get(&queue_id)
    }

    pub fn get_mut(&mut self, topic: &str, queue_id: i32) -> Option<&mut V> {
        self.by_topic.get_mut(topic)?.get_mut(&queue_id)
    }

    /// The entry for (topic, queue id), created by `make` if missing; the topic string is
    /// allocated only then.
    pub fn get_or_insert_with(
        &mut self,
        topic: &str,
        queue_id: i32,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        self.queues_mut(topic).entry(queue_id).or_insert_with(make)
    }

    pub fn insert(&mut self, topic: &str, queue_id: i32, value: V) {
        self.queues_mut(topic).insert(queue_id, value);
    }

    /// The topic's queues, an empty map created if missing; the topic string is allocated only
    /// then.
    fn queues_mut(&mut self, topic: &str) -> &mut HashMap<i32, V> {
        if !self.by_topic.contains_key(topic) {
            self.by_topic.insert(topic.to_owned(), HashMap::default());
        }
        self.by_topic.get_mut(topic).expect("inserted above")
    }

    pub fn remove(&mut self, topic: &str, queue_id: i32) -> Option<V> {
        let queues = self.by_topic.get_mut(topic)?;
        let removed = queues.remove(&queue_id);
        if queues.is_empty() {
            self.by_topic.remove(topic);
        }
        removed
    }

    /// Takes out every queue of `topic`.
    pub fn remove_topic(&mut self, topic: &str) -> Vec<(i32, V)> {
        self.by_topic
            .remove(topic)
            .map(|qs| qs.into_iter().collect())
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.by_topic.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, i32, &V)> {
        self.by_topic
            .iter()
            .flat_map(|(t, qs)| qs.iter().map(move |(q, v)| (t.as_str(), *q, v)))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.by_topic.values().flat_map(HashMap::values)
    }

    /// Keeps the entries for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, i32, &mut V) -> bool) {
        self.by_topic.retain(|topic, queues| {
            queues.retain(|q, v| keep(topic, *q, v));
            !queues.is_empty()
        });
    }

    /// Takes every entry out.
    pub fn drain(&mut self) -> impl Iterator<Item = (String, i32, V)> + '_ {
        self.by_topic
            .drain()
            .flat_map(|(t, qs)| qs.into_iter().map(move |(q, v)| (t.clone(), q, v)))
    }
}
