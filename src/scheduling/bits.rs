//! A small fixed-size bitset over instance-type indexes.

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Bits(Vec<u64>);

impl Bits {
    pub fn new(len: usize) -> Self {
        Bits(vec![0; len.div_ceil(64)])
    }

    pub fn full(len: usize) -> Self {
        let mut b = Bits::new(len);
        for i in 0..len {
            b.set(i);
        }
        b
    }

    pub fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    pub fn get(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Copies `a & b` into `self` without allocating.
    pub fn assign_and(&mut self, a: &Bits, b: &Bits) {
        for ((o, x), y) in self.0.iter_mut().zip(&a.0).zip(&b.0) {
            *o = x & y;
        }
    }

    /// `self &= other` (words `other` lacks are left as they are).
    pub fn and_with(&mut self, other: &Bits) {
        for (o, x) in self.0.iter_mut().zip(&other.0) {
            *o &= x;
        }
    }

    /// `self |= other`.
    pub fn or_with(&mut self, other: &Bits) {
        for (o, x) in self.0.iter_mut().zip(&other.0) {
            *o |= x;
        }
    }

    pub fn clear_all(&mut self) {
        self.0.iter_mut().for_each(|w| *w = 0);
    }

    /// Copies `other` (words it lacks become zero).
    pub fn copy_from(&mut self, other: &Bits) {
        for (i, o) in self.0.iter_mut().enumerate() {
            *o = other.0.get(i).copied().unwrap_or(0);
        }
    }

    pub fn clear(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }

    /// Indexes of set bits, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_iterate_and_intersect() {
        let mut a = Bits::new(130);
        a.set(0);
        a.set(64);
        a.set(129);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![0, 64, 129]);
        let b = Bits::full(130);
        let mut c = Bits::new(130);
        c.assign_and(&a, &b);
        assert_eq!(c.count(), 3);
        c.clear(64);
        assert!(!c.get(64) && c.get(129));
    }
}
