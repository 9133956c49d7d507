import { useEffect, useState, type RefObject } from 'react';

/**
 * Whether an element is on screen (with a margin), so off-screen charts skip their redraws: on a 2-core machine
 * the training worker and the page share the CPU. Without IntersectionObserver (server rendering), always true.
 */
export function useInView(ref: RefObject<Element | null>, rootMargin = '200px'): boolean {
  const [inView, setInView] = useState(typeof IntersectionObserver === 'undefined');
  useEffect(() => {
    const el = ref.current;
    if (!el || typeof IntersectionObserver === 'undefined') return;
    const io = new IntersectionObserver((entries) => setInView(entries.some((e) => e.isIntersecting)), {
      rootMargin,
    });
    io.observe(el);
    return () => io.disconnect();
  }, [ref, rootMargin]);
  return inView;
}
