//! Retention passes that run at once (the clean service and an admin's request) delete what one
//! pass would: each segment they judged, never the unexpired one after it.

mod common;

use std::sync::Barrier;
use std::time::{Duration, SystemTime};

use common::{config, put_one};
use pyrmq_store::MessageStore;

const SEGMENT: u64 = 64 * 1024;

#[test]
fn concurrent_passes_delete_only_the_expired_segment() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let fill = |store: &MessageStore| {
        while store.max_phy_offset() < store.min_phy_offset() + 3 * SEGMENT {
            put_one(store, "TopicOld", 0, &[7u8; 1200], b"");
        }
    };
    fill(&store);
    let expired = SystemTime::now() - Duration::from_secs(100 * 3600);
    let now_ms = pyrmq_store::clock::now_ms();
    for round in 0..2000 {
        let oldest = dir
            .path()
            .join("commitlog")
            .join(format!("{:020}", store.min_phy_offset()));
        std::fs::File::options()
            .write(true)
            .open(&oldest)
            .and_then(|f| f.set_modified(expired))
            .unwrap();
        let before = store.min_phy_offset();
        let start = Barrier::new(2);
        let deleted: Vec<usize> = std::thread::scope(|s| {
            let passes: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        store.delete_expired_files(now_ms, true).unwrap()
                    })
                })
                .collect();
            passes.into_iter().map(|p| p.join().unwrap()).collect()
        });
        assert_eq!(
            deleted.iter().sum::<usize>(),
            1,
            "round {round}: {deleted:?}"
        );
        assert_eq!(store.min_phy_offset(), before + SEGMENT, "round {round}");
        fill(&store);
    }
}
