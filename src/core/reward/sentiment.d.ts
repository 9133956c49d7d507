// Minimal typings for the `sentiment` package (AFINN-165), which ships none. Only what reward/functions.ts uses.
declare module 'sentiment' {
  interface SentimentResult {
    /** Sum of the AFINN scores (−5…+5 each) of the matched words, a negator flipping the next word's sign. */
    score: number;
    /** score / number of tokens in the text. */
    comparative: number;
    tokens: string[];
    words: string[];
    positive: string[];
    negative: string[];
  }
  class Sentiment {
    constructor(options?: Record<string, unknown>);
    analyze(phrase: string, options?: { language?: string }): SentimentResult;
  }
  export default Sentiment;
}
