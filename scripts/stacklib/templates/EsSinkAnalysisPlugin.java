package essink.analysis;

import java.io.IOException;
import java.util.Arrays;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.email.UAX29URLEmailTokenizer;
import org.apache.lucene.analysis.pattern.PatternCaptureGroupTokenFilter;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.elasticsearch.index.analysis.AbstractTokenFilterFactory;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/** The analysis components of the .security index that the integ-test-zip lacks. */
public class EsSinkAnalysisPlugin extends Plugin implements AnalysisPlugin {
    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        AnalysisProvider<TokenFilterFactory> capture = (index, env, name, settings) -> {
            Pattern[] patterns = settings.getAsList("patterns").stream()
                .map(Pattern::compile).toArray(Pattern[]::new);
            boolean preserve = settings.getAsBoolean("preserve_original", true);
            return new AbstractTokenFilterFactory(name) {
                @Override
                public TokenStream create(TokenStream in) {
                    return new PatternCaptureGroupTokenFilter(in, preserve, patterns);
                }
            };
        };
        AnalysisProvider<TokenFilterFactory> unique = (index, env, name, settings) ->
            new AbstractTokenFilterFactory(name) {
                @Override
                public TokenStream create(TokenStream in) {
                    return new Unique(in);
                }
            };
        return Map.of(
            "pattern_capture", AnalysisPlugin.requiresAnalysisSettings(capture), "unique", unique);
    }

    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        return Map.of("uax_url_email", (index, env, name, settings) ->
            TokenizerFactory.newFactory(name, UAX29URLEmailTokenizer::new));
    }

    /** Drops every token whose term was already seen in the stream. */
    static final class Unique extends TokenFilter {
        private final CharTermAttribute term = addAttribute(CharTermAttribute.class);
        private final CharArraySet seen = new CharArraySet(8, false);

        Unique(TokenStream in) {
            super(in);
        }

        @Override
        public boolean incrementToken() throws IOException {
            while (input.incrementToken()) {
                if (!seen.contains(term.buffer(), 0, term.length())) {
                    seen.add(Arrays.copyOf(term.buffer(), term.length()));
                    return true;
                }
            }
            return false;
        }

        @Override
        public void reset() throws IOException {
            super.reset();
            seen.clear();
        }
    }
}
