// The English text the zoo trains its BPE tokenizer on: original prose
// written for expertd (no third-party text), ASCII only, about 20 KB.
#include "models/zoo/corpus.h"

namespace expertd::models::zoo {

absl::string_view TrainingCorpus() {
  static constexpr char kText[] =
      R"corpus(The morning was cold and clear. A thin layer of frost covered the fields, and the river moved slowly under a pale blue sky. In the small town at the edge of the valley, people were beginning their day. The baker had been awake since four o'clock, shaping loaves of bread and setting them in the oven. The smell of fresh bread drifted down the main street, past the post office, the library and the old stone church.

Maria opened the door of her shop at eight. She sold books, maps and a few newspapers, and she knew most of her customers by name. "Good morning," she said to the first visitor, a tall man with a grey beard who came in every Tuesday. "Your order arrived yesterday." He smiled and thanked her. They talked for a while about the weather, about the new bridge the council wanted to build, and about a novel they had both read last winter.

Every language is a system of sounds, words and rules that people use to share their thoughts. Children learn to speak by listening to the people around them. They repeat words, make mistakes, and slowly discover how sentences are built. By the age of five, most children can use thousands of words and form complex sentences without ever studying grammar. Scientists still debate how this remarkable ability develops, and whether it depends on special structures in the human brain.

Computers store information as numbers. A single bit can be either zero or one, and eight bits make a byte. Text is stored by giving every character a number: the letter A is 65, the letter B is 66, and a space is 32. Modern systems use a standard called Unicode, which assigns numbers to more than one hundred thousand characters from almost every writing system in the world. When a program reads a file, it must know which encoding was used, or the text will look like nonsense.

A neural network is a function with many parameters. It takes an input, such as a sequence of words, and produces an output, such as a prediction of the next word. During training, the network sees many examples and adjusts its parameters to reduce its errors. This process is called gradient descent. Each step moves the parameters a little in the direction that makes the error smaller. After millions of steps, the network can often make surprisingly good predictions.

Large language models are trained on enormous collections of text. They learn patterns of grammar, facts about the world, and styles of writing. A mixture of experts is a kind of model in which only a small part of the network is used for each word. A router decides which experts should process each token. Because most experts are idle for any given token, the model can have a very large number of parameters while keeping the cost of each step low.

The recipe for a simple soup is easy to follow. First, cut two onions, three carrots and a few potatoes into small pieces. Heat some oil in a large pot and cook the onions until they are soft and golden. Add the carrots and potatoes, then pour in enough water or stock to cover the vegetables. Season with salt, pepper and a bay leaf. Let the soup simmer for about thirty minutes, stirring from time to time. When the vegetables are tender, you can serve the soup as it is, or blend it until it is smooth.

History is full of surprising turns. Great cities have risen and fallen, empires have spread across continents and then disappeared, and ideas that once seemed strange have become common sense. The printing press, invented in the fifteenth century, made books cheaper and helped knowledge spread across Europe. The steam engine changed the way goods were made and moved. In the twentieth century, electricity, radio, television and computers transformed daily life in ways that earlier generations could hardly imagine.

The forest was quiet except for the sound of the wind in the trees. Tall pines and old oaks stood close together, and the ground was covered with moss, ferns and fallen leaves. A small stream ran between the rocks. Deer came to drink there in the evening, and sometimes a fox could be seen hunting for mice at the edge of the clearing. Birds built their nests high in the branches, and in spring the whole forest was filled with their songs.

"Where are you going?" asked the little girl.
"To the market," said her grandfather. "We need apples, cheese and some eggs. Would you like to come with me?"
"Yes, please! Can we buy some cherries too?"
"If they have any, we will. But it is still early in the season."
They walked together down the hill, holding hands, while the sun climbed higher in the sky.

Mathematics is the study of numbers, shapes, patterns and change. Some of its ideas are very old: people counted, measured land and followed the stars thousands of years ago. Others are quite new. Algebra lets us reason about unknown quantities, geometry describes space, and calculus explains how things change over time. Probability and statistics help us understand uncertainty and make decisions when we do not have complete information. Today mathematics is used in physics, biology, economics, engineering and computer science.

The train left the station at twenty past nine. It was nearly full: students with heavy bags, workers reading the news on their phones, a family with two small children and a dog. Outside the window, the city gave way to suburbs, then to farms and open country. The conductor walked through the carriages checking tickets. After two hours the train reached the coast, and the passengers could see the sea shining in the distance.
)corpus"
      R"corpus(Good software is written for people as much as for machines. A clear program has short functions, meaningful names and comments that explain why something is done, not only what is done. Tests check that the code behaves as expected and protect it against future mistakes. When a bug appears, a careful engineer first reproduces it, then finds the smallest example that shows the problem, and only then changes the code. Reading other people's code is one of the best ways to learn.

A server is a program that waits for requests and sends back responses. When many clients connect at the same time, the server must share its resources fairly. It may place incoming requests in a queue, process several of them together in a batch, and stream results back as soon as they are ready. Engineers measure the latency of each request, the throughput of the whole system, and the memory it uses. They watch these numbers closely, because users notice when a service becomes slow.

The weather changed quickly in the mountains. In the morning the sky had been bright and warm, but by noon dark clouds were gathering over the peaks. The climbers decided to turn back before the storm arrived. They reached the hut just as the first drops of rain began to fall. Inside, they made tea, dried their clothes by the stove and listened to the thunder rolling across the valley. By evening the storm had passed, and the stars came out one by one.

Water covers about seventy percent of the surface of the Earth. Most of it is salt water in the oceans; only a small fraction is fresh water in rivers, lakes, glaciers and underground. The sun heats the oceans, and water evaporates into the air. As the warm, moist air rises, it cools, and the water vapour condenses into clouds. Eventually the water falls back to the ground as rain or snow, flows into streams and rivers, and returns to the sea. This endless journey is called the water cycle.

Music can express feelings that are difficult to put into words. A slow melody in a minor key may sound sad, while a fast rhythm can make people want to dance. Every culture has its own instruments and traditions, from drums and flutes to violins, pianos and electric guitars. Musicians practise for many years to master their instruments. Some play from written notes, others improvise, creating new music in the moment.

My brother and I grew up in a house near the harbour. We spent our summers on the water, sailing a small wooden boat that our father had built. He taught us how to read the wind, how to tie knots, and how to find our way home when the fog came in. We were not always careful, and once we lost an oar and had to paddle back with our hands. Our mother was not pleased, but years later she laughed whenever we told the story.

The human body is made of trillions of cells. Each cell contains instructions, written in DNA, that tell it how to grow, work and divide. Cells of the same kind form tissues, such as muscle or nerve tissue, and tissues form organs, such as the heart, the lungs and the brain. The heart pumps blood through a network of vessels, carrying oxygen and nutrients to every part of the body. Regular exercise, good food and enough sleep help the body stay healthy.

A good teacher does more than explain facts. She asks questions, listens to the answers, and helps her students discover ideas for themselves. She notices when someone is confused and finds another way to explain the problem. She encourages curiosity and patience, and she is not afraid to say, "I don't know, but let's find out together." Many people remember a teacher who changed the way they thought about the world.

Cities need careful planning. Roads, railways, water pipes, power lines and parks must all fit together. Planners think about where people will live and work, how they will travel, and how much space they will need in ten or twenty years. A well planned city has safe streets for walking and cycling, efficient public transport, and green spaces where people can rest and children can play. Poor planning can lead to traffic, pollution and neighbourhoods without shops or schools.

The old lighthouse stood on a rocky point at the end of the island. For more than a century its lamp had guided ships away from the dangerous reef. The keeper lived alone in a small cottage next to the tower. Every evening he climbed the spiral stairs, cleaned the glass and lit the lamp. On stormy nights he stayed awake until dawn, watching the beam sweep across the black water. Now the light is automatic, and the cottage is a museum for visitors.

Numbers appear everywhere in daily life. A loaf of bread costs 3 dollars, a bus ticket 2.50, and a cup of coffee 4.20. The temperature today is 18 degrees, and tomorrow it may reach 24. There are 7 days in a week, 12 months in a year and 365 days in most years. In 2024 the town celebrated its 800th anniversary with music, food and fireworks. About 15000 people came to the festival, and the main concert began at 8:30 in the evening.

Science advances through observation, experiment and argument. A scientist proposes a hypothesis, designs an experiment to test it, and carefully records the results. If the results do not agree with the prediction, the hypothesis must be changed or rejected. Other scientists repeat the experiment to check whether they obtain the same results. Over time, ideas that survive many tests become part of our shared understanding, although they may still be revised when new evidence appears.
)corpus"
      R"corpus(Once upon a time there was a king who had three daughters. The youngest was the cleverest, but nobody listened to her, because she was the smallest. One day a giant came down from the mountains and demanded half of the kingdom. The king did not know what to do. His generals wanted to fight, and his ministers wanted to pay. The youngest daughter said, "Let me speak to him." She walked alone to the giant's camp, asked him three riddles, and he could not answer any of them. Ashamed, the giant went back to the mountains and never returned.

Travel teaches us about other people and about ourselves. In a foreign country, even simple things, like buying a ticket or ordering dinner, can become small adventures. We learn a few words of a new language, taste unfamiliar dishes, and see how others live, work and celebrate. Sometimes we feel lost or tired, but we also find kindness from strangers. When we return home, we often see our own town with new eyes.

Farming has changed a great deal over the last hundred years. Machines now do much of the work that was once done by hand or by animals. Farmers use weather forecasts, soil tests and satellite images to decide when to plant and when to harvest. Yet the basic questions remain the same: how to keep the soil healthy, how to protect the crops from pests and drought, and how to grow enough food for everyone while caring for the land.

The museum opened a new exhibition about ancient ships. Visitors could see models of boats made from reeds, wooden galleys with long rows of oars, and great sailing ships with three masts. There were maps drawn by early explorers, instruments for measuring the height of the stars, and letters written by sailors to their families. One room explained how sailors found their way across the open ocean, using the sun, the stars, the winds and the currents.

Sleep is essential for health. While we sleep, the brain sorts and stores memories, the body repairs its tissues, and energy is restored. Adults usually need between seven and nine hours of sleep each night, and children need even more. Bright screens late in the evening, caffeine and stress can make it harder to fall asleep. A regular routine, a dark and quiet room, and a little exercise during the day can help.

The committee met on Thursday to discuss the budget for the coming year. The chair opened the meeting and asked each member to report. The treasurer explained that income had increased slightly, but costs had risen faster. Several members suggested ways to save money, such as sharing equipment with the neighbouring school and reducing the use of paper. After a long discussion, the committee agreed on a plan and scheduled another meeting for the following month.

Light travels faster than anything else in the universe, at almost three hundred thousand kilometres per second. Light from the sun takes about eight minutes to reach the Earth, and light from the nearest stars takes several years. When we look at the night sky, we see the stars not as they are now, but as they were when the light left them. Some of the faint points of light are not single stars at all, but distant galaxies containing billions of stars.

He opened the letter slowly. It was from his sister, who had moved abroad many years ago. She wrote about her garden, her work at the hospital, and her children, who were now at university. At the end she asked whether he would visit in the summer. He read the letter twice, put it on the table, and looked out of the window for a long time. Then he took a pen and a sheet of paper and began to write his answer.

The rules of the game are simple. Each player starts with seven cards. On your turn, you may play a card that matches the colour or the number of the card on the table, or you may draw a new card from the pile. Some special cards let you skip the next player, reverse the order of play, or make another player draw extra cards. The first player to get rid of all their cards wins the round.

Energy can take many forms: heat, light, motion, electricity and chemical energy stored in food and fuel. It cannot be created or destroyed, only changed from one form to another. A power station burns fuel or uses wind, water or sunlight to turn generators that produce electricity. Cables carry the electricity to homes and factories, where it is used for lighting, heating, cooking and running machines. Using energy wisely helps reduce costs and protect the environment.

Friendship is one of the great pleasures of life. Good friends share our joys and help us through difficult times. They tell us the truth even when it is uncomfortable, and they forgive our mistakes. Friendships can begin in school, at work, in a sports club or by chance on a long journey. Some last only a season, while others continue for a lifetime, growing deeper with every year.

The village market is held every Saturday in the square. Farmers bring vegetables, fruit, honey and flowers; a fisherman sells the morning's catch; and an old woman offers jars of jam made from her own berries. People come not only to shop but also to meet their neighbours, exchange news and drink coffee at the small cafe on the corner. By one o'clock the stalls are packed away and the square is quiet again.
)corpus"
      R"corpus(Questions and answers.
What is the capital of France? The capital of France is Paris.
How many legs does a spider have? A spider has eight legs.
Why is the sky blue? Sunlight is scattered by the air, and blue light is scattered more than red light.
Who wrote the letter? My grandmother wrote it when she was twenty years old.
When does the shop close? It closes at six o'clock on weekdays and at noon on Sundays.
Which way is the station? Go straight ahead, turn left at the bakery, and you will see it on your right.
Can you help me carry these boxes? Of course, where should I put them?

Winter arrived early that year. By November the lake had frozen, and the children skated on the ice after school while their parents watched from the shore, wrapped in thick coats and scarves. At night the temperature fell far below zero, and the windows were decorated with delicate patterns of frost. The village seemed to sleep under a heavy blanket of snow, and the only sounds were the crunch of boots on the paths and the distant bark of a dog.

An engineer designing a bridge must consider the weight of the traffic, the force of the wind, changes in temperature, and the strength of the ground beneath the supports. Steel expands in summer and contracts in winter, so joints allow the structure to move slightly without cracking. Before construction begins, engineers build computer models and sometimes small physical models to test their designs. A well built bridge can serve a city for more than a hundred years.

The library is a quiet place full of possibilities. On its shelves you can find adventure stories, poetry, dictionaries, atlases, biographies of famous scientists and artists, and practical guides to gardening, cooking or repairing a bicycle. Librarians help visitors search the catalogue, recommend books for every age, and organise reading groups, lectures and workshops. Anyone can borrow books for free, which makes the library one of the most democratic institutions in a town.

Memory in a computer is organised in levels. The fastest memory, the registers and caches inside the processor, is very small. Main memory is larger but slower, and storage devices such as solid state drives are larger still and slower again. Programs run fastest when the data they need is already close to the processor. Good systems predict which data will be needed next and fetch it in advance, so that the processor rarely has to wait.

Kindness costs nothing but means a great deal. Holding a door open, thanking the bus driver, listening to a friend who is worried, or helping a neighbour carry heavy shopping are small actions, yet they can change someone's whole day. Research suggests that people who help others often feel happier themselves. Kindness also spreads: when we are treated well, we are more likely to treat others well in turn.

The painter set up her easel on the hill above the town. She mixed colours on her palette: deep green for the fields, ochre for the roofs, and a soft violet for the shadows of the evening. She worked quickly, because the light was changing every minute. As the sun went down, the windows of the houses began to glow, and the river turned from silver to gold. When she finally put down her brush, the first stars were appearing above the church tower.
)corpus";
  return absl::string_view(kText, sizeof(kText) - 1);
}

}  // namespace expertd::models::zoo
