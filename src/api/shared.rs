//! [`Shared`]: a field that equal objects hold once.
//!
//! The pods of one ReplicaSet, Job or DaemonSet are made from one template,
//! so their containers, tolerations, spread constraints, affinity and node
//! selector are equal. The controller keeps every pod in memory, and those
//! fields are most of a stored pod's size (a `TopologySpreadConstraint`'s
//! label selector alone is a 540-byte B-tree node). A `Shared` field is an
//! `Arc`, and [`Shared::intern`] makes equal values one allocation, so a
//! Deployment of 1,000 pods holds its template's fields once.
//!
//! Interning keeps weak references only: a value no pod holds any more is
//! freed, and its entry is swept once the table has doubled since the last
//! sweep. A `Shared` reads as its value (`Deref`) and is written copy on
//! write (`DerefMut` clones a value other pods share), so code that reads
//! or builds a pod does not see the sharing; it serialises as the value.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that equal objects share (see the module).
#[derive(Default)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub fn new(value: T) -> Self {
        Shared(Arc::new(value))
    }

    /// The value, `None` when another object shares it.
    pub fn get_mut(&mut self) -> Option<&mut T> {
        Arc::get_mut(&mut self.0)
    }

    /// Whether the two hold the same allocation.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<T: Serialize + PartialEq + Send + Sync + 'static> Shared<T> {
    /// Makes this the allocation every equal value interned before holds,
    /// if one still lives; else this one becomes it.
    pub fn intern(&mut self) {
        let hash = content_hash(&*self.0);
        let key = (TypeId::of::<T>(), hash);
        let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let same = table.entries.get(&key).and_then(|ws| {
            ws.iter()
                .filter_map(|w| w.upgrade()?.downcast::<T>().ok())
                .find(|v| **v == *self.0)
        });
        match same {
            Some(v) => self.0 = v,
            None => {
                let any: Arc<dyn Any + Send + Sync> = self.0.clone();
                table
                    .entries
                    .entry(key)
                    .or_default()
                    .push(Arc::downgrade(&any));
                table.len += 1;
                if table.len >= table.sweep_at {
                    table.sweep();
                }
            }
        }
    }
}

/// The interned values by type and content hash.
struct Table {
    entries: HashMap<(TypeId, u64), Vec<Weak<dyn Any + Send + Sync>>>,
    /// Weak references held, live or not.
    len: usize,
    /// `len` at which dead entries are swept next.
    sweep_at: usize,
}

impl Table {
    const FIRST_SWEEP: usize = 4096;

    fn sweep(&mut self) {
        self.entries.retain(|_, ws| {
            ws.retain(|w| w.strong_count() > 0);
            !ws.is_empty()
        });
        self.len = self.entries.values().map(Vec::len).sum();
        self.sweep_at = (self.len * 2).max(Self::FIRST_SWEEP);
    }
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(|| {
    Mutex::new(Table {
        entries: HashMap::new(),
        len: 0,
        sweep_at: Table::FIRST_SWEEP,
    })
});

/// A hash of the value's JSON, written straight into the hasher (the API
/// types implement no `Hash`).
fn content_hash<T: Serialize>(value: &T) -> u64 {
    struct Writer(DefaultHasher);
    impl std::io::Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Writer(DefaultHasher::new());
    // Serialising an API value into a hasher cannot fail; a value that
    // did would only hash as far as it got, which costs a share, not a
    // wrong answer (equality decides).
    let _ = serde_json::to_writer(&mut w, value);
    w.0.finish()
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(Arc::clone(&self.0))
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<'a, T> IntoIterator for &'a Shared<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;
    fn into_iter(self) -> Self::IntoIter {
        (&*self.0).into_iter()
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Shared::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_interned_share_one_allocation() {
        let mut a = Shared::new(vec!["interned-a".to_string(), "x".to_string()]);
        let mut b = Shared::new(vec!["interned-a".to_string(), "x".to_string()]);
        let mut c = Shared::new(vec!["interned-a".to_string(), "y".to_string()]);
        assert!(!Shared::ptr_eq(&a, &b));
        a.intern();
        b.intern();
        c.intern();
        assert!(Shared::ptr_eq(&a, &b));
        assert!(!Shared::ptr_eq(&a, &c));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn a_write_to_a_shared_value_copies_it() {
        let mut a = Shared::new(vec![1u32, 2]);
        a.intern();
        let mut b = Shared::new(vec![1u32, 2]);
        b.intern();
        assert!(Shared::ptr_eq(&a, &b));
        b.push(3);
        assert_eq!(*a, vec![1, 2]);
        assert_eq!(*b, vec![1, 2, 3]);
        assert!(!Shared::ptr_eq(&a, &b));
    }

    #[test]
    fn a_value_no_one_holds_is_not_kept() {
        let mut a = Shared::new(vec![7u64, 7, 7, 9]);
        a.intern();
        let weak = Arc::downgrade(&a.0);
        drop(a);
        assert!(
            weak.upgrade().is_none(),
            "the table holds weak references only"
        );
        let mut b = Shared::new(vec![7u64, 7, 7, 9]);
        b.intern();
        assert_eq!(*b, vec![7, 7, 7, 9]);
    }

    #[test]
    fn values_of_other_types_with_the_same_json_stay_apart() {
        let mut a = Shared::new(vec![5u8]);
        let mut b = Shared::new(vec![5u16]);
        a.intern();
        b.intern();
        assert_eq!(*a, vec![5u8]);
        assert_eq!(*b, vec![5u16]);
    }

    #[test]
    fn a_shared_value_serialises_and_reads_as_its_value() {
        let a: Shared<Vec<String>> = serde_json::from_str(r#"["a","b"]"#).unwrap();
        assert_eq!(*a, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(serde_json::to_string(&a).unwrap(), r#"["a","b"]"#);
    }
}
